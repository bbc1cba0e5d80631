echo 2 > /proc/sys/kernel/numa_balancing
command -v tmux >/dev/null || { echo "no tmux in the guest"; exit 1; }
export LANG=C.UTF-8 TERM=xterm TERMINFO=/lib/terminfo
T="tmux -L top"
# The workload runs in a cgroup of its own, for the cgroup view.
mkdir -p /sys/fs/cgroup/topw || exit 1
cat > /tmp/top-w.sh <<'EOS'
echo $$ > /sys/fs/cgroup/topw/cgroup.procs || exit 1
exec numatrace workload "$@"
EOS
$T new-session -d -x 120 -y 40 -s top "numatrace top --interval 1 -- sh /tmp/top-w.sh hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --compute-ms 500 --duration 90 --summary $RESULTS/workload.json 2> $RESULTS/top.err; echo \$? > $RESULTS/top.rc; stty -a > $RESULTS/stty.txt; sleep 60" || exit 1
# Wait (up to 60 s) for the workload's row with non-zero hint faults/s.
i=0
while [ $i -lt 60 ]; do
	sleep 1
	i=$((i + 1))
	$T capture-pane -p -t top > "$RESULTS/screen.txt" || break
	if awk '$2 == "hot-chunks" && $3 != "0" && $3 != "0.0" { found = 1 } END { exit !found }' "$RESULTS/screen.txt"; then
		break
	fi
done
echo "top ran $i s before the capture"
$T display-message -p -t top '#{alternate_on}' > "$RESULTS/alt_before.txt"
# The cgroup view, then the workload's cgroup's processes: filtered to
# it by name (the busiest row changes from one frame to the next), the
# filter accepted (which selects its first match) and opened.
$T send-keys -t top c
sleep 2
$T capture-pane -p -t top > "$RESULTS/screen_cgroups.txt"
$T send-keys -t top -l /topw
$T send-keys -t top Enter
sleep 1
$T capture-pane -p -t top > "$RESULTS/screen_cgroups_filtered.txt"
$T send-keys -t top Enter
sleep 2
$T capture-pane -p -t top > "$RESULTS/screen_in_cgroup.txt"
$T send-keys -t top q
i=0
while [ ! -s "$RESULTS/stty.txt" ] && [ $i -lt 30 ]; do
	sleep 1
	i=$((i + 1))
done
sleep 1
$T display-message -p -t top '#{alternate_on}' > "$RESULTS/alt_after.txt"
$T capture-pane -p -t top > "$RESULTS/screen_after.txt"
$T kill-server
cat "$RESULTS/screen.txt" "$RESULTS/screen_cgroups.txt" "$RESULTS/screen_cgroups_filtered.txt" "$RESULTS/screen_in_cgroup.txt"
cat "$RESULTS/top.err"
rmdir /sys/fs/cgroup/topw
exit 0
