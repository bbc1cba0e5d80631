echo 2 > /proc/sys/kernel/numa_balancing
knob=/sys/kernel/debug/sched/numa_balancing/fault_count_threshold
echo 6000 > $knob || exit 1
cat $knob > threshold
numatrace doctor --json > doctor.json
echo $? > doctor.rc
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 600 > filler.json &
filler=$!
sleep 8
numatrace shadow --json -o shadow.json --record t.trace --model fault-count:threshold=6000 --model fault-count:threshold=6000,stamp=latest -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 25 --min-faults 20000 --max-duration 150 --summary workload.json || exit 1
echo 2000 > $knob || exit 1
numatrace shadow --json -o shared.json --record s.trace --model fault-count:threshold=2000,stamp=latest -- numatrace workload hot-chunks --procs 3 --threads 2 --slow-mb 16 --shared-mb 48 --chunk-mb 8 --accesses 3000 --duration 8 --min-faults 4000 --max-duration 150 --summary shared-workload.json || exit 1
kill $filler
numatrace stats t.trace --json > stats.json
numatrace stats t.trace > stats.txt
numatrace stats s.trace --json > shared-stats.json
