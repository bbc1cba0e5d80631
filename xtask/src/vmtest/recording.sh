echo 2 > /proc/sys/kernel/numa_balancing
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 300 > filler.json &
filler=$!
sleep 8
numatrace shadow --json -o shadow.json --record t.trace -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 25 --min-faults 20000 --max-duration 150 --summary workload.json || exit 1
kill $filler
numatrace stats t.trace --json > stats.json
