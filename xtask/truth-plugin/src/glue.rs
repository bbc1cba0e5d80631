//! The plugin API of QEMU 7.2 (version 1): the few calls used, declared
//! as its `qemu-plugin.h` has them; QEMU resolves them when it loads the
//! plugin.
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Mutex;

use numa_core::truth::STATS_SUFFIX;

use crate::counter::Counter;

type PluginId = u64;

#[repr(C)]
struct Tb([u8; 0]);
#[repr(C)]
struct Insn([u8; 0]);
#[repr(C)]
struct HwAddr([u8; 0]);

type MemCb = extern "C" fn(c_uint, u32, u64, *mut c_void);

/// `QEMU_PLUGIN_CB_NO_REGS`, `QEMU_PLUGIN_MEM_RW`.
const CB_NO_REGS: c_int = 0;
const MEM_RW: c_int = 3;

extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: extern "C" fn(PluginId, *mut Tb));
    fn qemu_plugin_tb_n_insns(tb: *const Tb) -> usize;
    fn qemu_plugin_tb_get_insn(tb: *const Tb, idx: usize) -> *mut Insn;
    fn qemu_plugin_insn_vaddr(insn: *const Insn) -> u64;
    fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut Insn,
        cb: MemCb,
        flags: c_int,
        rw: c_int,
        udata: *mut c_void,
    );
    fn qemu_plugin_mem_is_store(info: u32) -> bool;
    fn qemu_plugin_get_hwaddr(info: u32, vaddr: u64) -> *mut HwAddr;
    fn qemu_plugin_hwaddr_is_io(haddr: *const HwAddr) -> bool;
    fn qemu_plugin_hwaddr_phys_addr(haddr: *const HwAddr) -> u64;
    fn qemu_plugin_register_atexit_cb(
        id: PluginId,
        cb: extern "C" fn(PluginId, *mut c_void),
        udata: *mut c_void,
    );
}

/// User space on x86-64: addresses below the canonical hole.
const USER_END: u64 = 1 << 47;

struct State {
    counter: Counter<BufWriter<File>>,
    marker: u64,
    stats_path: String,
    error: Option<String>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Parses the arguments and opens the raw file; the error is what QEMU
/// prints when it refuses to load the plugin.
pub(crate) fn install(id: u64, argc: c_int, argv: *const *const c_char) -> Result<(), String> {
    let mut out = None;
    let mut marker = None;
    for i in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: QEMU passes argc valid NUL-terminated strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) }.to_string_lossy();
        match arg.split_once('=') {
            Some(("out", path)) => out = Some(path.to_owned()),
            Some(("marker", addr)) => marker = Some(parse_addr(addr)?),
            _ => {
                return Err(format!(
                    "unknown argument {arg:?}: give out=PATH and marker=ADDR"
                ))
            }
        }
    }
    let out = out.ok_or("no out=PATH")?;
    let marker = marker.ok_or("no marker=ADDR")?;
    let file = File::create(&out).map_err(|e| format!("{out}: {e}"))?;
    let counter =
        Counter::new(BufWriter::with_capacity(1 << 20, file)).map_err(|e| format!("{out}: {e}"))?;
    *STATE.lock().map_err(|_| "state poisoned")? = Some(State {
        counter,
        marker,
        stats_path: format!("{out}{STATS_SUFFIX}"),
        error: None,
    });
    // SAFETY: the callbacks match the API's signatures.
    unsafe {
        qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
        qemu_plugin_register_atexit_cb(id, at_exit, std::ptr::null_mut());
    }
    Ok(())
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("marker={s}: {e}"))
}

extern "C" fn tb_trans(_id: PluginId, tb: *mut Tb) {
    // SAFETY: `tb` is valid for the duration of the callback.
    unsafe {
        for i in 0..qemu_plugin_tb_n_insns(tb) {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            if qemu_plugin_insn_vaddr(insn) < USER_END {
                qemu_plugin_register_vcpu_mem_cb(
                    insn,
                    mem_access,
                    CB_NO_REGS,
                    MEM_RW,
                    std::ptr::null_mut(),
                );
            }
        }
    }
}

extern "C" fn mem_access(_vcpu: c_uint, info: u32, vaddr: u64, _udata: *mut c_void) {
    let Ok(mut guard) = STATE.lock() else {
        return;
    };
    let Some(s) = guard.as_mut() else {
        return;
    };
    // SAFETY: `info` and `vaddr` come from QEMU for this access.
    let (store, placed) = unsafe {
        let hw = qemu_plugin_get_hwaddr(info, vaddr);
        let placed = (!hw.is_null() && !qemu_plugin_hwaddr_is_io(hw))
            .then(|| qemu_plugin_hwaddr_phys_addr(hw));
        (qemu_plugin_mem_is_store(info), placed)
    };
    // The marker page's own accesses are the ticker's, not the workload's;
    // only a store to the marker word is a tick.
    if vaddr & !0xfff == s.marker & !0xfff {
        if store && vaddr == s.marker && s.error.is_none() {
            if let Err(e) = s.counter.tick() {
                s.error = Some(e.to_string());
            }
        }
        return;
    }
    s.counter.access(placed.map(|pa| pa >> 12), store);
}

extern "C" fn at_exit(_id: PluginId, _udata: *mut c_void) {
    let Ok(mut guard) = STATE.lock() else {
        return;
    };
    let Some(mut s) = guard.take() else {
        return;
    };
    if let Err(e) = s.counter.finish() {
        s.error.get_or_insert(e.to_string());
    }
    let stats = format!(
        "beyond {}\nunplaced {}\nerror {}\n",
        s.counter.beyond,
        s.counter.unplaced,
        s.error.as_deref().unwrap_or("none")
    );
    // Nothing to report a failure to at exit: the host finds the file
    // missing and says so.
    let _ = File::create(&s.stats_path).and_then(|mut f| f.write_all(stats.as_bytes()));
}
