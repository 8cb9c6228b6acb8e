use std::collections::BTreeMap;

use super::*;
use fatkit_arch::toolkit::CudaVersion;
use fatkit_toolchain::Nvcc;

#[test]
fn host_code_is_found_outside_comments_and_strings() {
    let src = b"// launch<<<1, 1>>>() in a comment\n/* int main() {\n} */\nconst char* s = \"k<<<1,1>>>()\";\n__global__ void k() {}\nvoid run() { k<<<1, 32>>>(); }\n";
    assert_eq!(
        host_code(src),
        Some((6, "a kernel launch (<<<...>>>) is host code".to_owned()))
    );
    assert_eq!(
        host_code(b"#include <cuda_fp16.h>\n#include <vector>\n"),
        Some((2, "#include <vector> is a host-only header".to_owned()))
    );
    assert_eq!(
        host_code(b"\n\nint main(int argc, char** argv) { return 0; }\n"),
        Some((3, "main() is host code".to_owned()))
    );
    assert_eq!(
        host_code(b"#include <cstdint>\n__device__ int maintain(int x) { return x << 3; }\n"),
        None
    );
    // Host code NVRTC never sees.
    let guarded = b"#ifndef __CUDACC_RTC__\n#include <vector>\nvoid go() { k<<<1, 1>>>(); }\n#else\n#define X 1\n#endif\n#if !defined(__CUDA_ARCH__)\nint main() {}\n#endif\n#ifdef __CUDACC_RTC__\n#else\nvoid h() { k<<<1, 1>>>(); }\n#endif\n";
    assert_eq!(host_code(guarded), None);
    assert_eq!(
        host_code(b"#ifndef __CUDACC_RTC__\n#else\nvoid h() { k<<<1, 1>>>(); }\n#endif\n"),
        Some((3, "a kernel launch (<<<...>>>) is host code".to_owned()))
    );
}

#[test]
fn paths_under_the_base_are_made_relative() {
    let base = Some(Path::new("/home/me/project"));
    assert_eq!(
        relative(Path::new("/home/me/project/cuda-src/a.cu"), base),
        Path::new("cuda-src/a.cu")
    );
    assert_eq!(
        relative(Path::new("/home/me/project"), base),
        Path::new(".")
    );
    assert_eq!(
        relative(Path::new("/opt/include"), base),
        Path::new("/opt/include")
    );
    assert_eq!(
        relative(Path::new("/home/me/project-2/x.cu"), base),
        Path::new("/home/me/project-2/x.cu")
    );
    assert_eq!(relative(Path::new("/a/b.cu"), None), Path::new("/a/b.cu"));
}

#[test]
fn names() {
    assert_eq!(
        module_name(Path::new("cuda-src/softmax-v2.cu")),
        "softmax_v2"
    );
    assert_eq!(module_name(Path::new("3d.cu")), "_3d");
}

fn toolchain(compiler: Compiler, version: &str, targets: &str) -> (Toolchain, Probe) {
    let version: CudaVersion = version.parse().unwrap();
    let targets =
        fatkit_arch::notation::parse_any(targets, &fatkit_arch::notation::Context::default())
            .unwrap();
    let tc = match compiler {
        Compiler::Nvcc => Toolchain::Nvcc(Nvcc::at(PathBuf::from("/x"), Some(version), "test")),
        Compiler::Nvrtc => Toolchain::Nvrtc(fatkit_toolchain::Nvrtc {
            library: PathBuf::from("/x/libnvrtc.so"),
            root: PathBuf::from("/x"),
            include_dirs: Vec::new(),
            version: Some(version),
            source: "test".into(),
        }),
    };
    let probe = Probe {
        compiler,
        version,
        build: String::new(),
        targets,
        host: None,
        identity: format!("{compiler}{version}"),
    };
    (tc, probe)
}

fn routed(profile: &Profile, toolchains: &[(Toolchain, Probe)]) -> String {
    match route(profile, toolchains) {
        Ok(routes) => routes
            .iter()
            .map(|(t, i)| format!("{t}={}", toolchains[*i].0.short(&toolchains[*i].1)))
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => e.to_string(),
    }
}

#[test]
fn routes_newest_then_pins() {
    let found = [
        toolchain(Compiler::Nvcc, "11.8", "sm_70 sm_80 compute_80"),
        toolchain(Compiler::Nvcc, "13.2", "sm_80 sm_120 compute_120"),
        toolchain(Compiler::Nvrtc, "12.9", "sm_70 sm_80 sm_120 compute_120"),
        toolchain(Compiler::Nvrtc, "13.2", "sm_80 sm_120"),
    ];
    let ctx = fatkit_arch::notation::Context::default();
    let mut profile = Profile {
        name: "p".into(),
        description: String::new(),
        targets: fatkit_arch::notation::parse_any("sm_70 sm_80 sm_120 compute_120", &ctx).unwrap(),
        extra: TargetSet::new(),
        compress: fatkit_arch::profile::Compression::None,
        budget: None,
        min_cuda: None,
        pins: BTreeMap::new(),
    };
    // Newest per target; nvcc before NVRTC of the same release.
    assert_eq!(
        routed(&profile, &found),
        "sm_70=nvrtc 12.9 sm_80=nvcc 13.2 sm_120=nvcc 13.2 compute_120=nvcc 13.2"
    );
    profile
        .pins
        .insert("sm_70".parse().unwrap(), "nvcc 11.8".parse().unwrap());
    profile
        .pins
        .insert("sm_120".parse().unwrap(), "nvrtc".parse().unwrap());
    assert_eq!(
        routed(&profile, &found),
        "sm_70=nvcc 11.8 sm_80=nvcc 13.2 sm_120=nvrtc 13.2 compute_120=nvcc 13.2"
    );
    profile
        .pins
        .insert("sm_80".parse().unwrap(), "nvcc 12".parse().unwrap());
    let err = routed(&profile, &found);
    assert!(
        err.starts_with("no toolchain found can build sm_80 (profile p)"),
        "{err}"
    );
    assert!(
        err.contains("sm_80 is pinned to nvcc 12 by the profile's [toolchain] table"),
        "{err}"
    );
    profile.pins.clear();
    profile.min_cuda = Some(CudaVersion::new(13, 0));
    assert!(routed(&profile, &found).contains("sm_70 needs CUDA"));
}
