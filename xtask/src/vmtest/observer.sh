# Every run on vCPU 0 ($pin), numatrace's reader with the workload.
traced="$pin numatrace -q stats --live --"
fresh() {
	echo 1 > /proc/sys/kernel/numa_balancing
	echo 2 > /proc/sys/kernel/numa_balancing
	run "$@"
}
part() {
	echo $2 > $nb/hot_threshold_ms
	fresh $1_bare_0 $pin $W
	i=0
	while [ $i -lt $3 ]; do
		fresh $1_traced_$i $traced $W
		i=$((i + 1))
		fresh $1_bare_$i $pin $W
	done
}
fresh warmup $pin $W
part cliff 100 2
part promote 10000 1
echo 100 > $nb/hot_threshold_ms
