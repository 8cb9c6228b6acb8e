//! The product compute capabilities on which a library runs, judged by architecture, and what
//! that judgement set aside ([`RunsOn`]).

use std::collections::BTreeSet;

use fatkit_arch::products;
use fatkit_arch::rules::{Device, Policy, Status};
use fatkit_arch::Cc;

use crate::coverage::{Declarations, Excuses, KernelImages};
use crate::general::Roles;

/// Where no kernel fails, and what was excused there.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RunsOn {
    /// The product compute capabilities, oldest first.
    pub(crate) ccs: Vec<Cc>,
    /// Whether some parts for other GPUs were set aside on one of them.
    pub(crate) aside: bool,
    /// The kernels excused on one of them by their crate's declaration, each once, in order.
    pub(crate) declared: Vec<String>,
}

/// The product compute capabilities on which no kernel fails, judged by architecture:
/// declared kernels and parts for other GPUs aside, every kernel runs or may.
pub(crate) fn runs_on(
    kernels: &[KernelImages],
    declarations: &Declarations,
    roles: &Roles,
    policy: Policy,
) -> RunsOn {
    let mut out = RunsOn::default();
    if kernels.is_empty() {
        return out;
    }
    let mut declared: BTreeSet<&str> = BTreeSet::new();
    for cc in products::product_ccs() {
        let device = Device::new(cc, None);
        let mut set_aside = false;
        let mut excused: Vec<&str> = Vec::new();
        // Some kernel must run there: one whose every kernel is excused runs nothing.
        let mut some_runs = false;
        let mut chooser = crate::kernel::Chooser::new(&device, policy);
        let runs = kernels.iter().all(|k| {
            if chooser.status(k) != Status::Fails {
                some_runs = true;
                return true;
            }
            if declarations.excuses_device(k, &device, policy) {
                excused.push(&k.name);
                return true;
            }
            let other = roles.for_other_gpus(k, &device, policy).is_some();
            set_aside |= other;
            other
        });
        if runs && (some_runs || excused.is_empty()) {
            out.ccs.push(cc);
            out.aside |= set_aside;
            declared.extend(excused);
        }
    }
    out.ccs.sort();
    out.declared = declared.into_iter().map(str::to_owned).collect();
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fatkit_arch::{Target, TargetSet};

    use super::*;
    use crate::coverage::as_images;

    fn kernel(name: &str, targets: &str) -> KernelImages {
        let set: TargetSet = targets
            .split(' ')
            .map(|n| Target::parse_name(n).unwrap())
            .collect();
        KernelImages {
            fatbin: Some((100, 7)),
            ..as_images(name, &set)
        }
    }

    #[test]
    fn a_kernel_declared_for_newer_gpus_is_named_where_it_is_excused() {
        let mut bytes = b"\x7fELF..".to_vec();
        bytes.extend_from_slice(
            b"fatkit:declared:v2;module=quant;fatbin=100:0000000000000007;quant_sm80=sm_80,sm_90;end;",
        );
        let declarations = Declarations::scan(&bytes);
        let kernels = vec![
            kernel("dequant", "sm_70 sm_75 sm_80 sm_90"),
            kernel("quant_sm80", "sm_80 sm_90"),
        ];
        let runs = runs_on(&kernels, &declarations, &Roles::strict(), Policy::default());
        assert!(runs.ccs.contains(&"7.0".parse().unwrap()));
        assert_eq!(runs.declared, ["quant_sm80"]);
        // Undeclared, the same kernel keeps CC 7.x out, and nothing is excused.
        let runs = runs_on(
            &kernels,
            &Declarations::default(),
            &Roles::strict(),
            Policy::default(),
        );
        assert!(!runs.ccs.contains(&"7.0".parse().unwrap()));
        assert!(runs.declared.is_empty());
    }

    /// A library whose every kernel its crate declares for sm_80 and newer runs nothing on a
    /// V100, nor on a GPU its targets do not serve at all (CC 11.0 beside sm_80 and sm_90):
    /// neither is a compute capability it runs on.
    #[test]
    fn where_every_kernel_is_excused_nothing_runs() {
        let mut bytes = b"\x7fELF..".to_vec();
        bytes.extend_from_slice(
            b"fatkit:declared:v2;module=quant;fatbin=100:0000000000000007;a=sm_80,sm_90;b=sm_80,sm_90;end;",
        );
        let declarations = Declarations::scan(&bytes);
        let kernels = vec![kernel("a", "sm_80 sm_90"), kernel("b", "sm_80 sm_90")];
        let runs = runs_on(&kernels, &declarations, &Roles::strict(), Policy::default());
        let ccs: Vec<String> = runs.ccs.iter().map(|c| c.to_string()).collect();
        assert!(ccs.contains(&"8.0".to_owned()) && ccs.contains(&"9.0".to_owned()));
        for none in ["7.0", "7.5", "11.0", "12.0"] {
            assert!(!ccs.contains(&none.to_owned()), "{none} in {ccs:?}");
        }
    }
}
