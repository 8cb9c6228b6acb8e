//! A built module as it is written: `<module>.manifest.json` (one `Serialize + Deserialize`
//! type, [`Manifest`]) and `<module>.rs`, the Rust `include!`d by `fatkit_runtime::include_module!`.

use std::collections::BTreeMap;

use fatkit_arch::driver::MinDriver;
use fatkit_arch::toolkit::{CudaVersion, PtxIsa};
use fatkit_arch::{Compiler, Compression, ImageKind, Target, TargetSet};
use serde::{Deserialize, Serialize};

use crate::kernel_sets::{self, Declared};
use crate::sources::rust_identifier;

/// The manifest schema this fatkit writes.
pub const SCHEMA: u32 = 1;

/// One entry of a module manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub target: Target,
    pub kind: ImageKind,
    /// `nvcc` or `nvrtc`.
    pub compiler: Compiler,
    /// The compiler's CUDA release.
    pub toolkit: CudaVersion,
    pub ptx_isa: Option<PtxIsa>,
    pub size: usize,
    /// The kernels whose body the image holds.
    pub kernels: Vec<String>,
    /// The kernels the image holds only as a stub (their body compiled out for this target,
    /// where another image has it): each declared away from the target, or the build fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stubs: Vec<StubbedKernel>,
}

/// A kernel an image holds only as a stub, and what its code there does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StubbedKernel {
    pub kernel: String,
    pub stub: fatkit_arch::load::Stub,
}

/// One kernel parameter: its offset and size in bytes in the parameter buffer, as every image
/// of the kernel lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub offset: u32,
    pub size: u32,
}

/// A kernel and the targets whose images hold it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelTargets {
    pub name: String,
    pub targets: TargetSet,
    /// Its parameters, in order; `None` when no image says (a manifest from before they were
    /// recorded).
    #[serde(default)]
    pub params: Option<Vec<Param>>,
    /// Set when the kernel is built for fewer targets than the module by declaration
    /// (`targets = "sm_80+" (*_bf16)`, `as built`): not a gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    /// Its name as people read it, where that is not its symbol (a C++ kernel, demangled by
    /// fatkit-build): what the runtime's messages say (the generated `NAMES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demangled: Option<String>,
}

/// The sha256 (as `sha256sum` prints it) of a module's `.fatbin` and `.rs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub fatbin_sha256: String,
    pub rust_sha256: String,
}

impl Written {
    pub fn of(fatbin: &[u8], rust: &[u8]) -> Written {
        Written {
            fatbin_sha256: crate::out::sha256_hex(fatbin),
            rust_sha256: crate::out::sha256_hex(rust),
        }
    }
}

/// `<module>.manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub module: String,
    pub source: String,
    pub profile: String,
    pub fatbin: String,
    pub fatbin_size: usize,
    pub fatbin_blake3: String,
    /// The module's files as written: how fatkit knows them for its own before replacing or
    /// removing them (fatkit-build's `owned`), and a build script's check knows them for the ones
    /// this manifest describes ([`crate::prebuilt`]). Absent in manifests from before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<Written>,
    pub compression: Compression,
    pub min_driver: Option<MinDriver>,
    pub entries: Vec<ManifestEntry>,
    pub kernels: Vec<KernelTargets>,
    /// What the module was built from, for a package's build-script check
    /// ([`crate::prebuilt`]); absent outside `[package.metadata.fatkit]` packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<crate::inputs::Inputs>,
}

impl Manifest {
    /// Every kernel with the targets of the images that hold it, and its declaration when
    /// those are fewer than the module's by design.
    pub fn kernel_targets(
        entries: &[ManifestEntry],
        declared: &BTreeMap<String, Declared>,
        params: &BTreeMap<String, Vec<Param>>,
    ) -> Vec<KernelTargets> {
        let mut kernels: BTreeMap<String, TargetSet> = BTreeMap::new();
        for e in entries {
            for k in &e.kernels {
                kernels.entry(k.clone()).or_default().insert(e.target);
            }
        }
        kernels
            .into_iter()
            .map(|(name, targets)| KernelTargets {
                demangled: None,
                declared: declared.get(&name).map(|d| d.how.clone()),
                params: params.get(&name).cloned(),
                name,
                targets,
            })
            .collect()
    }

    /// The declared partial sets, by kernel.
    pub fn declared(&self) -> BTreeMap<String, Declared> {
        self.kernels
            .iter()
            .filter_map(|k| {
                Some((
                    k.name.clone(),
                    Declared {
                        targets: k.targets.clone(),
                        how: k.declared.clone()?,
                    },
                ))
            })
            .collect()
    }

    pub fn to_json(&self) -> Vec<u8> {
        // A manifest is plain data: serialising it cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

/// The minimum driver of a module: the highest of the floors of the GPUs of the tables, each
/// the need of the image the driver loads there (`fatkit_arch::floor`, as `package`, `plan`,
/// `profiles` and `doctor` say it: PTX counts only where it is what loads), and ZSTD entries a
/// CUDA 12.4-level driver.
pub fn min_driver(entries: &[ManifestEntry], compression: Compression) -> Option<MinDriver> {
    let images: Vec<fatkit_arch::Image> = entries
        .iter()
        .map(|e| fatkit_arch::Image::of(e.target, e.ptx_isa).built_by(Some(e.toolkit)))
        .collect();
    let floors = fatkit_arch::floor::floors(&[images], &[], &fatkit_arch::products::product_ccs());
    let mut needs: Vec<(CudaVersion, String)> = Vec::new();
    if let Some(r) = &floors.release {
        let ccs: Vec<String> = r.set_by.iter().map(|c| c.to_string()).collect();
        needs.extend(r.floor.cuda.map(|cuda| {
            (
                cuda,
                format!("the image the driver loads on CC {}", ccs.join(" ")),
            )
        }));
    }
    if let Some(v) = compression.min_driver_cuda() {
        needs.push((v, format!("{} compression", compression.name())));
    }
    MinDriver::of(needs)
}

/// `softmax_f32` -> `SOFTMAX_F32`.
fn const_name(kernel: &str) -> String {
    rust_identifier(kernel, true)
}

/// A constant name per kernel, in order: [`const_name`], and where two kernels would share one
/// (`scale` and `Scale`, `a-b` and `a_b`), the later gets `_2`, `_3`, ... (the first free).
/// Linear in the names, however many collide.
fn const_names<'a>(kernels: impl Iterator<Item = &'a str>) -> Vec<(String, &'a str)> {
    let mut used: std::collections::HashSet<String> = Default::default();
    // For each base name, the suffix to try next: no suffix is tried twice.
    let mut next: std::collections::HashMap<String, usize> = Default::default();
    let mut out = Vec::new();
    for kernel in kernels {
        let base = const_name(kernel);
        let mut name = base.clone();
        if used.contains(&name) {
            let n = next.entry(base.clone()).or_insert(2);
            loop {
                name = format!("{base}_{n}");
                *n += 1;
                if !used.contains(&name) {
                    break;
                }
            }
        }
        used.insert(name.clone());
        out.push((name, kernel));
    }
    out
}

/// Where a generated module's `FATBIN` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FatbinSource {
    /// `include_bytes!("<module>.fatbin")`, 8-byte aligned.
    Included,
    /// The symbol a host-code library defines at the start of the fatbin its stub registers
    /// (`Build::compile_library`): the same bytes, not a second copy.
    Linked { symbol: String },
}

/// `<module>.rs`, for `include!`: the fatbin (8-byte aligned), the manifest, kernel names.
pub fn generate_rust(manifest: &Manifest, fatbin: &[u8]) -> String {
    generate_rust_from(manifest, fatbin, &FatbinSource::Included)
}

/// [`generate_rust`], with `FATBIN` from `source`.
pub fn generate_rust_from(manifest: &Manifest, fatbin: &[u8], source: &FatbinSource) -> String {
    let m = &manifest.module;
    let fatbin_item = match source {
        FatbinSource::Included => format!(
            "/// The fatbin, 8-byte aligned for `cuModuleLoadData`.\n\
             pub static FATBIN: &[u8] = {{\n    #[repr(C, align(8))]\n    struct Aligned<T: ?Sized>(T);\n    \
             static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!(\"{m}.fatbin\"));\n    &ALIGNED.0\n}};\n\n"
        ),
        FatbinSource::Linked { symbol } => format!(
            "/// The fatbin in the host-code library, where its stub registers it with the CUDA\n\
             /// runtime (8-byte aligned): the library's own images, not a copy.\n\
             pub static FATBIN: &[u8] = {{\n    unsafe extern \"C\" {{\n        #[link_name = \"{symbol}\"]\n        \
             static LINKED: [u8; {}];\n    }}\n    \
             // SAFETY: the library's build defined the symbol at the start of this fatbin, {} bytes\n    \
             // of read-only data; the fingerprint below is checked against them before any use.\n    \
             unsafe {{ &LINKED }}\n}};\n\n",
            fatbin.len(),
            fatbin.len()
        ),
    };
    let mut out = format!(
        "// @generated by `fatkit build-kernels` from {} (profile {}). Do not edit.\n\n\
         /// The module's name.\npub const NAME: &str = \"{m}\";\n\n\
         {fatbin_item}\
         /// The fatbin's size and fingerprint as built (`fatkit_arch::fingerprint`):\n\
         /// `fatkit_runtime::Module` refuses a fatbin from another build.\n\
         pub const FATBIN_FINGERPRINT: Option<(usize, u64)> = Some(({}, {:#018x}));\n\n\
         /// The manifest: kernels x targets, toolkit and PTX ISA per entry, minimum driver.\n\
         pub static MANIFEST_JSON: &str = include_str!(\"{m}.manifest.json\");\n\n\
         /// Every target in the fatbin.\npub const TARGETS: &[&str] = &[{}];\n\n\
         /// Every image: (target, PTX ISA as (major, minor) for PTX, kernels it holds), for\n\
         /// `fatkit_runtime::Module` to check a device against without parsing anything.\n\
         pub type ImageRow = (&'static str, Option<(u8, u8)>, &'static [&'static str]);\n\n\
         /// The rows, one per entry of the fatbin.\n\
         pub const IMAGES: &[ImageRow] = &[\n{}];\n\n\
         /// The kernels built for fewer targets than the module by declaration, as a record\n\
         /// `fatkit_runtime::Module` reads (and `fatkit audit` finds in the final binary).\n\
         #[used] // kept in the binary when only `FATBIN` is taken from this module\npub static DECLARED: &str = {:?};\n\n\
         /// Each kernel's parameters as (offset, size) in bytes, read from its images (which\n\
         /// agree): what `fatkit_runtime` checks a launch's arguments against.\n\
         pub const PARAMS: &[(&str, &[(u32, u32)])] = &[\n{}];\n\n\
         /// Kernel names, as `cuModuleGetFunction` wants them.\npub mod kernels {{\n",
        // Names from file names and profiles, in a comment: no line break may end it early.
        manifest
            .source
            .rsplit('/')
            .next()
            .unwrap_or(&manifest.source)
            .escape_debug(),
        manifest.profile.escape_debug(),
        fatbin.len(),
        fatkit_arch::fingerprint::fingerprint(fatbin),
        manifest
            .entries
            .iter()
            .map(|e| format!("\"{}\"", e.target))
            .collect::<Vec<_>>()
            .join(", "),
        manifest
            .entries
            .iter()
            .map(|e| {
                let isa = e.ptx_isa.map_or_else(
                    || "None".to_owned(),
                    |i| format!("Some(({}, {}))", i.major, i.minor),
                );
                let kernels: Vec<String> = e.kernels.iter().map(|k| format!("{k:?}")).collect();
                format!(
                    "    (\"{}\", {isa}, &[{}]),\n",
                    e.target,
                    kernels.join(", ")
                )
            })
            .collect::<String>(),
        kernel_sets::record(&manifest.module, fatbin, &manifest.declared()),
        manifest
            .kernels
            .iter()
            .filter_map(|k| {
                let params: Vec<String> = k
                    .params
                    .as_ref()?
                    .iter()
                    .map(|p| format!("({}, {})", p.offset, p.size))
                    .collect();
                Some(format!("    ({:?}, &[{}]),\n", k.name, params.join(", ")))
            })
            .collect::<String>(),
    );
    insert_items(&mut out, manifest);
    for (name, kernel) in const_names(manifest.kernels.iter().map(|k| k.name.as_str())) {
        out.push_str(&format!("    pub const {name}: &str = {kernel:?};\n"));
    }
    out.push_str("}\n");
    out
}

/// The items only some modules have (`NAMES`, `STUBS`), before the kernels module, so that
/// the file reads as before where there are none.
fn insert_items(out: &mut String, manifest: &Manifest) {
    for item in [names_item(manifest), stubs_item(manifest)]
        .into_iter()
        .flatten()
    {
        let at = out.rfind("/// Kernel names, as").unwrap_or(out.len());
        out.insert_str(at, &item);
    }
}

/// The generated `NAMES` item, where some kernel reads otherwise than its symbol.
fn names_item(manifest: &Manifest) -> Option<String> {
    let rows: Vec<String> = manifest
        .kernels
        .iter()
        .filter_map(|k| {
            Some(format!(
                "    ({:?}, {:?}),\n",
                k.name,
                k.demangled.as_ref()?
            ))
        })
        .collect();
    (!rows.is_empty()).then(|| {
        format!(
            "/// Kernels as people read them (C++ names demangled): (symbol, name), for the words\n\
             /// of `fatkit_runtime`'s errors.\n\
             pub const NAMES: &[(&str, &str)] = &[\n{}];\n\n",
            rows.concat()
        )
    })
}

/// The generated `STUBS` item, where some image holds a kernel only as a stub.
fn stubs_item(manifest: &Manifest) -> Option<String> {
    let rows: Vec<String> = manifest
        .entries
        .iter()
        .flat_map(|e| {
            e.stubs.iter().map(move |s| {
                format!(
                    "    (\"{}\", {:?}, \"{}\"),\n",
                    e.target,
                    s.kernel,
                    s.stub.name()
                )
            })
        })
        .collect();
    (!rows.is_empty()).then(|| {
        format!(
            "/// Kernels an image holds only as a stub, their body compiled out for its target\n\
             /// (declared away from it): (target, kernel, what its code does). `fatkit_runtime`\n\
             /// refuses them on a GPU that would load that image.\n\
             pub const STUBS: &[(&str, &str, &str)] = &[\n{}];\n\n",
            rows.concat()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_constant_names_get_numbers_in_linear_time() {
        let names = ["scale", "Scale", "SCALE", "scale_2", "a-b", "a_b"];
        let got: Vec<String> = const_names(names.into_iter())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            got,
            ["SCALE", "SCALE_2", "SCALE_3", "SCALE_2_2", "A_B", "A_B_2"]
        );
        // 20,000 names that differ only in case: one constant each, all distinct, quickly
        // (the old scheme appended `_` until free: cubic in the names).
        let many: Vec<String> = (0..20_000u32)
            .map(|i| {
                (0..15)
                    .map(|b| if i & (1 << b) == 0 { 'k' } else { 'K' })
                    .collect::<String>()
                    + &format!("{}", i >> 15)
            })
            .collect();
        let got = const_names(many.iter().map(String::as_str));
        let distinct: std::collections::HashSet<&String> = got.iter().map(|(n, _)| n).collect();
        assert_eq!(distinct.len(), many.len());
        assert!(got.iter().all(|(n, _)| n.len() < 30), "names stay short");
    }

    fn manifest() -> Manifest {
        let entry =
            |target: &str, compiler, toolkit: &str, isa: Option<PtxIsa>, kernels: &[&str]| {
                let target: Target = target.parse().unwrap();
                ManifestEntry {
                    target,
                    kind: target.kind,
                    compiler,
                    toolkit: toolkit.parse().unwrap(),
                    ptx_isa: isa,
                    size: 1000,
                    kernels: kernels.iter().map(|k| k.to_string()).collect(),
                    stubs: Vec::new(),
                }
            };
        let entries = vec![
            entry(
                "sm_70",
                Compiler::Nvrtc,
                "12.9",
                None,
                &["saxpy", "_Z5scaleIfEvPT_S0_"],
            ),
            entry(
                "sm_120",
                Compiler::Nvcc,
                "13.2",
                None,
                &["saxpy", "_Z5scaleIfEvPT_S0_", "saxpy_bf16"],
            ),
            entry(
                "compute_120",
                Compiler::Nvcc,
                "13.2",
                Some(PtxIsa::new(9, 2)),
                &["saxpy", "_Z5scaleIfEvPT_S0_", "saxpy_bf16"],
            ),
        ];
        let mut declared = BTreeMap::new();
        declared.insert(
            "saxpy_bf16".to_owned(),
            Declared {
                targets: ["sm_120", "compute_120"]
                    .iter()
                    .map(|t| t.parse::<Target>().unwrap())
                    .collect(),
                how: "targets = \"sm_80+\" (*_bf16)".to_owned(),
            },
        );
        let p = |layout: &[(u32, u32)]| -> Vec<Param> {
            layout
                .iter()
                .map(|&(offset, size)| Param { offset, size })
                .collect()
        };
        let params: BTreeMap<String, Vec<Param>> = [
            ("saxpy", p(&[(0, 4), (4, 4), (8, 8), (16, 8)])),
            ("_Z5scaleIfEvPT_S0_", p(&[(0, 8), (8, 8)])),
            ("saxpy_bf16", p(&[(0, 4), (4, 2), (8, 8), (16, 8)])),
        ]
        .into_iter()
        .map(|(k, l)| (k.to_owned(), l))
        .collect();
        Manifest {
            schema: SCHEMA,
            module: "saxpy".into(),
            source: "cuda-src/saxpy.cu".into(),
            profile: "full".into(),
            fatbin: "saxpy.fatbin".into(),
            fatbin_size: 4096,
            fatbin_blake3: "00".repeat(32),
            written: None,
            compression: Compression::None,
            min_driver: min_driver(&entries, Compression::None),
            // As fatkit-build demangles them.
            kernels: Manifest::kernel_targets(&entries, &declared, &params)
                .into_iter()
                .map(|mut k| {
                    if k.name == "_Z5scaleIfEvPT_S0_" {
                        k.demangled = Some("scale<float>".to_owned());
                    }
                    k
                })
                .collect(),
            entries,
            inputs: None,
        }
    }

    #[test]
    fn names_are_generated_only_where_a_kernel_reads_otherwise() {
        let mut m = manifest();
        let rust = generate_rust(&m, b"fatbin");
        assert!(
            rust.contains("pub const NAMES: &[(&str, &str)] = &[\n    (\"_Z5scaleIfEvPT_S0_\", \"scale<float>\"),\n];"),
            "{rust}"
        );
        for k in &mut m.kernels {
            k.demangled = None;
        }
        assert!(!generate_rust(&m, b"fatbin").contains("NAMES"));
    }

    #[test]
    fn generated_rust() {
        expect_test::expect_file!["../../../tests/snapshots/generated-module.rs.txt"].assert_eq(
            &generate_rust(&manifest(), &[0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0]),
        );
    }

    #[test]
    fn manifest_round_trips() {
        let m = manifest();
        let json = m.to_json();
        expect_test::expect_file!["../../../tests/snapshots/generated-manifest.json"]
            .assert_eq(&String::from_utf8(json.clone()).unwrap());
        let back: Manifest = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn names() {
        assert_eq!(const_name("softmax_f32"), "SOFTMAX_F32");
        assert_eq!(const_name("_Z3fooPf"), "_Z3FOOPF");
    }

    #[test]
    fn stubs_are_generated_only_where_there_are_some() {
        let mut m = manifest();
        let plain = generate_rust(&m, b"fatbin");
        assert!(!plain.contains("STUBS"), "{plain}");
        m.entries[0].stubs.push(StubbedKernel {
            kernel: "saxpy_bf16".to_owned(),
            stub: fatkit_arch::load::Stub::Returns,
        });
        let rust = generate_rust(&m, b"fatbin");
        let target = m.entries[0].target;
        assert!(
            rust.contains(&format!(
                "pub const STUBS: &[(&str, &str, &str)] = &[\n    (\"{target}\", \"saxpy_bf16\", \"returns\"),\n];\n\n/// Kernel names"
            )),
            "{rust}"
        );
        // The manifest keeps them, and reads them back.
        let back: Manifest = serde_json::from_slice(&m.to_json()).unwrap();
        assert_eq!(back.entries[0].stubs, m.entries[0].stubs);
    }
}
