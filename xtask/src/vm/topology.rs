//! The guest's NUMA layout: node 0 with the CPUs and DRAM, node 1 CPU-less
//! and slow, as QEMU arguments and kernel command line.

use std::fmt::Write as _;

use anyhow::{bail, Result};

use crate::kernels::Tiering;

/// The guest's NUMA layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Topology {
    pub dram_mib: u64,
    pub slow_mib: u64,
    pub cpus: u32,
}

/// Memory hot-plug works in 128 MiB blocks on x86-64.
const BLOCK_MIB: u64 = 128;
/// q35 keeps at most 2 GiB of RAM below 4 GiB once the guest has >= 2.75 GiB.
const MAX_LOW_RAM_MIB: u64 = 2048;

impl Default for Topology {
    fn default() -> Self {
        Topology {
            dram_mib: 2048,
            slow_mib: 1024,
            cpus: 2,
        }
    }
}

impl Topology {
    pub(crate) fn validate(&self, tiering: Tiering) -> Result<()> {
        if self.cpus == 0 || self.cpus > 64 {
            bail!("--cpus {}: use 1 to 64", self.cpus);
        }
        if self.dram_mib < 512 {
            bail!(
                "--dram {}M: node 0 needs at least 512M to boot",
                self.dram_mib
            );
        }
        for (flag, mib) in [("--dram", self.dram_mib), ("--slow", self.slow_mib)] {
            if mib == 0 || mib % BLOCK_MIB != 0 {
                bail!("{flag} {mib}M: use a non-zero multiple of {BLOCK_MIB}M (the memory block size)");
            }
        }
        if tiering == Tiering::SoftReserved && self.dram_mib > MAX_LOW_RAM_MIB {
            bail!(
                "--dram {}M is too large for 6.1: node 0 must be exactly the RAM below 4 GiB, \
                 because node 1 is soft-reserved starting at 4 GiB \
                 (memmap=SIZE%0x100000000+0xefffffff), and q35 puts at most {MAX_LOW_RAM_MIB}M \
                 below 4 GiB. Use --dram {MAX_LOW_RAM_MIB}M or less",
                self.dram_mib
            );
        }
        Ok(())
    }

    /// QEMU machine, memory and NUMA arguments.
    pub(crate) fn qemu_args(&self, tiering: Tiering) -> Vec<String> {
        let mut machine = "q35,hmat=on".to_string();
        if tiering == Tiering::SoftReserved {
            // All of node 0 below 4 GiB, all of node 1 from 4 GiB on: the
            // range memmap= soft-reserves is then exactly node 1.
            let _ = write!(machine, ",max-ram-below-4g={}M", self.dram_mib);
        }
        let cpus = if self.cpus == 1 {
            "0".to_string()
        } else {
            format!("0-{}", self.cpus - 1)
        };
        let mut args: Vec<String> = vec![
            "-machine".into(),
            machine,
            "-smp".into(),
            self.cpus.to_string(),
            "-m".into(),
            format!("{}M", self.dram_mib + self.slow_mib),
            "-object".into(),
            format!("memory-backend-ram,id=m0,size={}M", self.dram_mib),
            "-object".into(),
            format!("memory-backend-ram,id=m1,size={}M", self.slow_mib),
            "-numa".into(),
            format!("node,nodeid=0,cpus={cpus},memdev=m0,initiator=0"),
            "-numa".into(),
            "node,nodeid=1,memdev=m1,initiator=0".into(),
            "-numa".into(),
            "dist,src=0,dst=1,val=20".into(),
        ];
        // HMAT: node 1 is 4x slower and has 1/5 of the bandwidth, which puts
        // it in a lower memory tier on kernels that use HMAT for tiering.
        for (target, latency_ns, bandwidth) in [(0, 10, "10G"), (1, 40, "2G")] {
            let lb = format!("hmat-lb,initiator=0,target={target},hierarchy=memory");
            args.push("-numa".into());
            args.push(format!(
                "{lb},data-type=access-latency,latency={latency_ns}"
            ));
            args.push("-numa".into());
            args.push(format!(
                "{lb},data-type=access-bandwidth,bandwidth={bandwidth}"
            ));
        }
        args
    }

    /// Extra kernel command line.
    pub(crate) fn kernel_args(&self, tiering: Tiering) -> Vec<String> {
        match tiering {
            Tiering::Hmat => Vec::new(),
            // 0xefffffff: E820_TYPE_SOFT_RESERVED.
            Tiering::SoftReserved => {
                vec![format!("memmap={}M%0x100000000+0xefffffff", self.slow_mib)]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_limits() {
        let t = |dram_mib, slow_mib| Topology {
            dram_mib,
            slow_mib,
            cpus: 2,
        };
        assert!(t(2048, 1024).validate(Tiering::SoftReserved).is_ok());
        assert!(t(3072, 1024).validate(Tiering::SoftReserved).is_err());
        assert!(t(3072, 1024).validate(Tiering::Hmat).is_ok());
        assert!(t(2048, 1000).validate(Tiering::Hmat).is_err());
        assert_eq!(
            t(1536, 1024).kernel_args(Tiering::SoftReserved),
            ["memmap=1024M%0x100000000+0xefffffff"]
        );
        let args = t(1536, 1024).qemu_args(Tiering::SoftReserved);
        assert!(args.contains(&"q35,hmat=on,max-ram-below-4g=1536M".to_string()));
        assert!(args.contains(&"2560M".to_string()));
    }
}
