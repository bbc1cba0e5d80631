echo 2 > /proc/sys/kernel/numa_balancing
D=/sys/kernel/debug/sched/numa_balancing
old_max=$(cat $D/scan_period_max_ms)
echo 1000 > $D/scan_period_max_ms
numatrace doctor --json > doctor.json
field() { sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p" doctor.json | head -1; }
budget=$(( ($(field fixed_bytes) + ($(field slow_pfns) + 7) / 8 * $(field slot_bytes) + 1023) / 1024 ))K
echo "budget for 1 in 8: $budget"
