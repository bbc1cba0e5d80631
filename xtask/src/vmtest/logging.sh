W='numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 2000 --duration 5'
for run in verbose quiet; do
  echo 2 > /proc/sys/kernel/numa_balancing
  flag=-v; [ $run = quiet ] && flag=-q
  numatrace $flag stats --live --json -- sh -c "echo 1 > /proc/sys/kernel/numa_balancing; exec $W --summary $RESULTS/$run-workload.json" > "$RESULTS/$run.json" 2> "$RESULTS/$run.err"
  echo $? > "$RESULTS/$run.rc"
done
echo 2 > /proc/sys/kernel/numa_balancing
