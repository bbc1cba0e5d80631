echo 2 > /proc/sys/kernel/numa_balancing
numatrace doctor --json > "$RESULTS/doctor.json"
echo $? > "$RESULTS/doctor.rc"
