echo 2 > /proc/sys/kernel/numa_balancing
dem=/sys/kernel/mm/numa/demotion_enabled
was=$(cat $dem)
# DRAM filled past its watermarks by an idle process while slow-tier
# chunks are promoted: kswapd (and allocations, in direct reclaim) demote
# the filler's pages to the slow node.
echo true > $dem
numatrace record -o on.trace -- numatrace workload hot-chunks --dram-mb 1900 --slow-mb 256 --chunk-mb 64 --accesses 200000 --in-turn --duration 20 --summary on-workload.json || exit 1
numatrace stats on.trace --json > on.json || exit 1
numatrace dump on.trace -o on.jsonl || exit 1
# Without demotion the same pressure demotes nothing (DRAM filled less:
# its pages cannot leave, and a full node would stop the filler).
echo false > $dem
numatrace stats --live --json -- numatrace workload hot-chunks --dram-mb 1600 --slow-mb 128 --chunk-mb 64 --accesses 100000 --in-turn --duration 10 --summary /dev/null > off.json || exit 1
echo "$was" > $dem
