echo 2 > /proc/sys/kernel/numa_balancing
dem=/sys/kernel/mm/numa/demotion_enabled
was=$(cat $dem)
# DRAM filled past its watermarks by an idle process while slow-tier
# chunks are promoted: kswapd (and allocations, in direct reclaim) demote
# the filler's pages to the slow node.
echo true > $dem
numatrace record -o on.trace -- numatrace workload hot-chunks --dram-mb 1900 --slow-mb 256 --chunk-mb 64 --accesses 200000 --in-turn --duration 20 --summary on-workload.json || exit 1
numatrace stats on.trace --json > on.json || exit 1
# The dump is counted, not kept: the results live in the guest's memory.
numatrace dump on.trace | grep -c '"type":"demote"' > on.dumped
rm on.trace
# Without demotion nothing is demoted (DRAM filled less: its pages cannot
# leave, and a full node would end the filler by the OOM killer).
echo false > $dem
numatrace stats --live --json -- numatrace workload hot-chunks --dram-mb 1200 --slow-mb 128 --chunk-mb 64 --accesses 100000 --in-turn --duration 10 --summary /dev/null > off.json || exit 1
echo "$was" > $dem
