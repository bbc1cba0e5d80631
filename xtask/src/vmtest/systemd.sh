# Runs in the systemd guest (numatrace-vmtest.service, cwd $RESULTS); the
# host check (systemd.rs) judges what it leaves. Each step records its exit
# status in a file and goes on, so one failure still leaves the rest's
# evidence.
say() { echo "systemd-test: $(cut -d' ' -f1 /proc/uptime) $*"; }
# wait_for SECONDS COMMAND...: polls COMMAND every second.
wait_for() {
	n=$1; shift
	while [ "$n" -gt 0 ]; do
		"$@" > /dev/null 2>&1 && return 0
		sleep 1; n=$((n - 1))
	done
	return 1
}
scrape() { curl -sf --max-time 10 http://127.0.0.1:9464/metrics; }
exporter_up() { scrape | grep -q '^numatrace_hint_faults_total '; }
prom() { # PromQL -> the API's JSON
	curl -sf --max-time 10 -G http://127.0.0.1:9090/api/v1/query --data-urlencode "query=$1"
}
prom_up() { prom 'up{job="numatrace"}' | grep -q '"1"\]'; }
vmstat_faults() { awk '$1 == "numa_hint_faults" { print $2 }' /proc/vmstat; }
ours() { numatrace doctor --loaded --json | grep -c '"numatrace": true'; }

systemctl is-system-running --wait > system-state.txt 2>&1
systemctl --failed --no-legend --plain > failed-units.txt 2>&1
say "system $(cat system-state.txt)"

apt-get install -y /numatrace-vmtest/deb/numatrace_*.deb > apt.log 2>&1
echo $? > apt.rc
numatrace doctor > doctor.txt 2>&1
echo $? > doctor.rc
say "installed (apt $(cat apt.rc)), doctor $(cat doctor.rc)"

echo 2 > /proc/sys/kernel/numa_balancing
cat >> /etc/default/numatrace <<'CONF'
NUMATRACE_EXPORT_OPTS="--listen 127.0.0.1:9464"
NUMATRACE_SHADOW_SECONDS=15
CONF

# Prometheus from its Debian unit, scraping the exporter every second.
cat > /etc/prometheus/prometheus.yml <<'CONF'
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: numatrace
    static_configs:
      - targets: ['127.0.0.1:9464']
CONF
systemctl restart prometheus.service
echo $? > prometheus-restart.rc

t0=$(cut -d' ' -f1 /proc/uptime)
systemctl enable --now numatrace-export.service > enable.log 2>&1
echo $? > enable.rc
wait_for 180 exporter_up
echo $? > exporter-up.rc
t1=$(cut -d' ' -f1 /proc/uptime)
echo "$t0 $t1" > attach-uptime.txt
say "exporter answering: $(cat exporter-up.rc) (enable at ${t0}s, answering at ${t1}s)"
systemctl status --no-pager numatrace-export.service > export-status.txt 2>&1
wait_for 120 prom_up
prom 'up{job="numatrace"}' > up.json
say "prometheus: $(cat up.json)"

# The workload's window: vmstat before and after, and Prometheus' view of
# the exporter's counter once it has scraped a quiet exporter each time.
sleep 3
vmstat_faults > vmstat-before.txt
sleep 3
prom 'numatrace_hint_faults_total' > prom-before.json
vmstat_faults > vmstat-before2.txt
numatrace workload hot-chunks --slow-mb 64 --chunk-mb 8 --accesses 4000 --duration 20 --summary workload.json > workload.log 2>&1
echo $? > workload.rc
sleep 3
vmstat_faults > vmstat-after.txt
sleep 3
prom 'numatrace_hint_faults_total' > prom-after.json
vmstat_faults > vmstat-after2.txt
scrape > metrics.txt
say "hint faults: vmstat $(cat vmstat-before.txt) -> $(cat vmstat-after.txt); prometheus $(cat prom-before.json) -> $(cat prom-after.json)"

# A probe warning: numa_balancing changed under the attached probes.
echo 1 > /proc/sys/kernel/numa_balancing
numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 2000 --duration 5 --summary /dev/null > /dev/null 2>&1
echo 2 > /proc/sys/kernel/numa_balancing
wait_for 30 sh -c 'journalctl -t numatrace -p warning --no-pager | grep -q "numa_balancing is"'
journalctl -t numatrace -p warning --no-pager > journal-warning.txt 2>&1
journalctl -u numatrace-export.service --no-pager > journal-export.txt 2>&1

systemd-analyze security --no-pager numatrace-export.service > security.txt 2>&1
echo $? > security.rc
cat security.txt

# SIGKILL, then restart: the exporter answers again, a new process.
systemctl show -p MainPID --value numatrace-export.service > pid-before-kill.txt
systemctl kill -s KILL numatrace-export.service
echo $? > kill.rc
systemctl restart numatrace-export.service
echo $? > restart.rc
wait_for 180 exporter_up
echo $? > restart-up.rc
scrape > metrics-after-restart.txt
systemctl show -p MainPID --value numatrace-export.service > pid-after-restart.txt
systemctl show -p NRestarts -p ActiveState -p MainPID numatrace-export.service > after-restart-show.txt
say "after kill+restart: answering $(cat restart-up.rc)"

# Stopped: no BPF object of numatrace's left (the kernel frees them after an
# RCU grace period: poll a little), no state file.
systemctl stop numatrace-export.service
echo $? > stop.rc
wait_for 20 sh -c '[ "$(numatrace doctor --loaded --json | grep -c "\"numatrace\": true")" = 0 ]'
numatrace doctor --loaded > loaded-after-stop.txt 2>&1
ours > loaded-after-stop.count
find /run/numatrace /var/lib/numatrace -type f > state-after-stop.txt 2>/dev/null
say "after stop: $(cat loaded-after-stop.count) objects of numatrace's loaded"

# The shadow unit: one 15 s period (restarting after each); a workload
# runs meanwhile so it has hint faults to record.
systemctl start numatrace-shadow.service
echo $? > shadow-start.rc
( i=0; while [ $i -lt 12 ]; do numatrace workload hot-chunks --slow-mb 32 --chunk-mb 8 --accesses 2000 --duration 10 --summary /dev/null > /dev/null 2>&1; i=$((i + 1)); done ) &
load=$!
wait_for 240 sh -c 'ls /var/lib/numatrace/shadow-*.json'
echo $? > shadow-report.rc
systemctl stop numatrace-shadow.service
kill $load 2>/dev/null
stat -c '%a %U %n' /var/lib/numatrace /var/lib/numatrace/* > shadow-modes.txt 2>&1
for f in /var/lib/numatrace/shadow-*.json; do cp "$f" shadow-report.json; done
journalctl -u numatrace-shadow.service --no-pager > journal-shadow.txt 2>&1
say "shadow: $(tr '\n' ' ' < shadow-modes.txt)"
exit 0
