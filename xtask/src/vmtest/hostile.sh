echo 2 > /proc/sys/kernel/numa_balancing
# "error" (never 0) when the objects cannot be listed.
ours() { o=$(numatrace doctor --loaded --json) || { echo error; return; }; echo "$o" | grep -c '"numatrace": true' || true; }
# run NAME CMD...: exit status, output, and numatrace's objects left after.
run() {
	name=$1; shift
	timeout -s KILL 60 "$@" > "$name.out" 2> "$name.err"; echo $? > "$name.rc"
	i=0; while [ "$(ours)" != 0 ] && [ $i -lt 20 ]; do sleep 0.5; i=$((i+1)); done
	ours > "$name.left"
}
echo 0 > /proc/sys/kernel/numa_balancing
run balancing numatrace stats --live --duration 3
echo 2 > /proc/sys/kernel/numa_balancing

grep -q '^nobody:' /etc/passwd 2>/dev/null || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd
run user su -s /bin/sh nobody -c 'numatrace stats --live --duration 3'

mount -t tmpfs none /sys/kernel/btf
run btf numatrace stats --live --duration 3
umount /sys/kernel/btf

mkdir -p /run/numatrace
state=/run/numatrace/promoter.json
echo 'not to be written' > /hostile-target
cp /hostile-target target.before
rm -f $state; mkfifo $state
run fifo numatrace top --once
rm -f $state; ln -s /hostile-target $state
run state_link numatrace promote --all --duration 3
[ -L $state ] && echo link > state_link.kept
rm -f $state
ln -s /hostile-target out.json
run out_link numatrace shadow --json --duration 2 -o out.json
[ -L out.json ] && echo link > out_link.kept
echo 'an earlier trace' > earlier.trace
cp earlier.trace earlier.before
run trace_exists numatrace record -o earlier.trace --duration 2
cmp -s /hostile-target target.before || echo changed > target.changed
cmp -s earlier.trace earlier.before || echo changed > earlier.changed

grep -q ' /sys/kernel/security ' /proc/mounts || mount -t securityfs none /sys/kernel/security
echo confidentiality > /sys/kernel/security/lockdown
cat /sys/kernel/security/lockdown > lockdown.mode
run lockdown numatrace stats --live --duration 3
