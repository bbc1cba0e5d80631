echo 2 > /proc/sys/kernel/numa_balancing
dem=/sys/kernel/mm/numa/demotion_enabled
was=$(cat $dem)
# One process whose memory is larger than DRAM, placed on DRAM (the part
# that does not fit, the first populated, is demoted as it is populated)
# and visited a chunk at a time, each visit touching about 70% of the
# chunk's pages, in three phases: a hot set A (the first half, mostly on
# the slow node) is promoted, pushing the pages least recently touched
# down (kswapd and direct reclaim); then a hot set B (the rest) pushes A
# down; then A again is promoted again.
echo true > $dem
# Every hint fault within 10 s of its scan promotes: the phases then move
# pages as fast as the scanner finds them, not at the pace of the hot
# threshold's latency test (1 s by default) on a full DRAM.
D=/sys/kernel/debug/sched/numa_balancing
old_th=$(cat $D/hot_threshold_ms)
trap 'echo $old_th > $D/hot_threshold_ms; echo $was > $dem' EXIT
echo 10000 > $D/hot_threshold_ms
# The workload's memory is charged to a cgroup of its own: each demoted
# folio names it.
echo +memory > /sys/fs/cgroup/cgroup.subtree_control || exit 1
mkdir -p /sys/fs/cgroup/demoted || exit 1
# Hundreds of thousands of hint faults on DRAM: a ring big enough that a
# reader slowed by the emulator loses none (the check needs every record).
numatrace record --ring-mb 64 -o on.trace -- sh -c 'echo $$ > /sys/fs/cgroup/demoted/cgroup.procs && exec numatrace workload hot-chunks --slow-node 0 --slow-mb 2400 --chunk-mb 64 --accesses 20000 --in-turn --phase-ms 8000 --duration 24 --summary on-workload.json' || exit 1
# memory.stat flushes its per-CPU counts on read only past a threshold
# (newer kernels); the kernel's own flush runs every 2 s and takes them
# all. The workload has exited, so nothing is demoted in between.
sleep 3
cat /sys/fs/cgroup/demoted/memory.stat > memcg.stat
numatrace stats on.trace --json --by cgroup > on.json || exit 1
numatrace top --replay on.trace --once --json > top.json || exit 1
# The dump is counted, not kept: the results live in the guest's memory.
numatrace dump on.trace | grep -c '"type":"demote"' > on.dumped
numatrace dump on.trace --format parquet --demotions -o /tmp/on.parquet 2> parquet.log || exit 1
rm -f /tmp/on.parquet
rm on.trace
# Without demotion nothing is demoted (less placed on DRAM: its pages
# cannot leave, and a full node would end the workload by the OOM killer).
echo false > $dem
numatrace stats --live --json -- numatrace workload hot-chunks --dram-mb 1200 --slow-mb 128 --chunk-mb 64 --accesses 100000 --in-turn --duration 6 --summary /dev/null > off.json || exit 1
echo "$was" > $dem
