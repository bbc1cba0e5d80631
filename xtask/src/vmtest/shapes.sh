echo 2 > /proc/sys/kernel/numa_balancing
thp=/sys/kernel/mm/transparent_hugepage/enabled
old_thp=$(sed 's/.*\[\(.*\)\].*/\1/' $thp)
echo madvise > $thp
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 300 > filler.json &
filler=$!
sleep 8
numatrace shadow --json -o shadow.json --record t.trace -- numatrace workload hot-chunks --thp --procs 3 --threads 3 --slow-mb 32 --shared-mb 32 --chunk-mb 8 --accesses 3000 --duration 6 --min-faults 3000 --max-duration 90 --summary workload.json
rc=$?
kill $filler
echo $old_thp > $thp
[ $rc = 0 ] || exit 1
numatrace stats t.trace --json > stats.json
