# The kernel's adaptive threshold moves once a minute by an eighth of
# hot_threshold_ms from where the last test left it (a 7.2 run after the
# suite's tests: 335,431 hint faults, 57,633 promotions, none of A twice).
# Switching into tiering mode resets it (reset_memory_tiering):
# hot_threshold_ms then holds for the next minute.
reset_threshold() { echo 0 > /proc/sys/kernel/numa_balancing; echo 2 > /proc/sys/kernel/numa_balancing; }
dem=/sys/kernel/mm/numa/demotion_enabled
was=$(cat $dem)
# Three phases of one process's accesses, a chunk at a time (each visit
# touches about 70% of the chunk's pages), with DRAM too small for both
# of its hot sets: hot set A (384 MiB on the slow node) is promoted; hot
# set B (384 MiB on the slow node) is promoted and pushes A, now the
# coldest, down (kswapd); A again is promoted again and pushes B down.
# DRAM is made small by reserving the rest of node 0 as huge pages
# (hugetlb is not on the LRU: reclaim neither demotes nor frees it), so
# that little colder than A is left to demote (below).
echo true > $dem
# Every hint fault within 10 s of its scan promotes: the phases then move
# pages as fast as the scanner finds them, not at the pace of the hot
# threshold's latency test (1 s by default) on a full DRAM.
D=/sys/kernel/debug/sched/numa_balancing
old_th=$(cat $D/hot_threshold_ms)
H=/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
# The tests after this one find the kernel's threshold as a boot leaves
# it: reset (below), not at the promoter's part's 1 ms.
trap 'touch run.done; echo 0 > $H; echo $old_th > $D/hot_threshold_ms; echo $was > $dem; reset_threshold' EXIT
echo 10000 > $D/hot_threshold_ms
reset_threshold
free0() { awk '/MemFree/ {print int($4 / 1024)}' /sys/devices/system/node/node0/meminfo; }
# Reserves huge pages on node 0 until $1 MiB (within 60) are left free.
# The tests before this one may still be returning their memory (a big
# process's exit takes seconds under the emulator), so the free memory is
# read again after each step until it holds still.
leave_free() {
	sync
	echo 3 > /proc/sys/vm/drop_caches
	echo 1 > /proc/sys/vm/compact_memory
	i=0
	steady=0
	while [ $i -lt 30 ]; do
		off=$(($(free0) - $1))
		if [ $off -le 60 ] && [ $off -ge -60 ]; then
			# Within reach twice in a row, a second apart: it holds still.
			steady=$((steady + 1))
			[ $steady -ge 2 ] && return 0
		else
			steady=0
			want=$(($(cat $H) + off / 2))
			[ $want -lt 0 ] && want=0
			echo $want > $H
		fi
		sleep 1
		i=$((i + 1))
	done
	echo "could not leave $1 MiB (within 60) of node 0 free: $(free0) MiB left with $(cat $H) huge pages reserved" >&2
	return 1
}
# Reclaim demotes the coldest memory on node 0 first, and the files of
# the guest's root file system (tmpfs: the earlier tests' results, about
# 50 MiB in the suite, and the trace being written, as much again) are
# colder than A: 440 MiB leaves B room to push A down after them. 6.1's
# own threshold adjustment refuses more of the hint faults here: it
# promotes 66,000 to 106,000 pages of A and B (6.12 and 7.2 150,000 and
# more), too few to fill 440 MiB when the emulator runs slowly, so its
# DRAM is smaller.
case $(uname -r) in
6.1.*) room=240 ;;
*) room=440 ;;
esac
free=$(free0)
leave_free $room || exit 1
echo "node 0: $free MiB free, $(cat $H) huge pages reserved, $(free0) MiB left" > dram.txt
# The workload's memory is charged to a cgroup of its own: each demoted
# folio names it.
echo +memory > /sys/fs/cgroup/cgroup.subtree_control || exit 1
mkdir -p /sys/fs/cgroup/demoted || exit 1
# Every hint fault of a quarter million: a ring big enough that a reader
# slowed by the emulator loses none (the check needs every record).
# Each phase lasts at least 8 s and until the hot set has pushed a fifth
# of the other's DRAM pages down: on a slow host a fixed 8 s can end
# B's phase before A has left DRAM, and then nothing of A goes round.
W='numatrace workload hot-chunks --slow-mb 768 --chunk-mb 64 --accesses 20000 --in-turn --phase-ms 8000 --phase-push 20 --phases 3 --max-duration 72'
# How full node 0 got, so that a run that demoted little says why.
(m=100000; while [ ! -e run.done ]; do f=$(free0); [ $f -lt $m ] && m=$f && echo $m > least; sleep 1; done) &
low=$!
numatrace record --ring-mb 64 -o on.trace -- sh -c "echo \$\$ > /sys/fs/cgroup/demoted/cgroup.procs && exec $W --summary on-workload.json" || exit 1
# memory.stat flushes its per-CPU counts on read only past a threshold
# (newer kernels); the kernel's own flush runs every 2 s and takes them
# all. The workload has exited, so nothing is demoted in between.
sleep 3
cat /sys/fs/cgroup/demoted/memory.stat > memcg.stat
touch run.done
wait $low
echo "the run's least free: $(cat least) MiB of node 0" >> dram.txt
rm run.done least
# numatrace's own promoter in the same phases, at half the size (hot sets
# of 192 MiB, 200 MiB of DRAM free: less than they and the cold files
# above take) and 6 s each: the kernel refuses nearly every page (a 1 ms
# threshold), the promoter moves them (no free floor: its moves of B push
# A down), and what it moved that reclaim demoted again is its
# ping-pong. The workload waits until the promoter is attached (its
# state file names the promoter's pid).
echo 1 > $D/hot_threshold_ms
leave_free 200 || exit 1
reset_threshold
echo "promoter's run: $(cat $H) huge pages reserved, $(free0) MiB left" >> dram.txt
W='numatrace workload hot-chunks --slow-mb 384 --chunk-mb 32 --accesses 10000 --in-turn --phase-ms 6000 --duration 18'
sh -c "while [ ! -e go ]; do sleep 0.2; done; exec $W --seed 2 --summary promoted-workload.json" &
w=$!
echo $w > promoted.pid
numatrace promote --pid $w --min-free 0% --ring-mb 16 --json -o promote.json 2> promote.err &
p=$!
i=0; while [ $i -lt 240 ] && ! grep -q "\"pid\": *$p[^0-9]" /run/numatrace/promoter.json 2>/dev/null; do sleep 0.5; i=$((i + 1)); done
touch go
wait $w
# The promoter stops by itself once its process has exited.
wait $p || exit 1
echo 0 > $H
numatrace stats on.trace --json --by cgroup > on.json || exit 1
numatrace top --replay on.trace --once --json > top.json || exit 1
# The dump is counted, not kept: the results live in the guest's memory.
numatrace dump on.trace | grep -c '"type":"demote"' > on.dumped
numatrace dump on.trace --format parquet --demotions -o /tmp/on.parquet 2> parquet.log || exit 1
rm -f /tmp/on.parquet
rm on.trace
# The reports above named the cgroup by its path, looked up as they ran.
rmdir /sys/fs/cgroup/demoted
# Without demotion nothing is demoted (less placed on DRAM: its pages
# cannot leave, and a full node would end the workload by the OOM killer).
echo false > $dem
numatrace stats --live --json -- numatrace workload hot-chunks --dram-mb 1200 --slow-mb 128 --chunk-mb 64 --accesses 100000 --in-turn --duration 6 --summary /dev/null > off.json || exit 1
echo "$was" > $dem
