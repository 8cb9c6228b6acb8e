//! Issue 41, what is compiled is what is hashed: a header or a source edited while the build
//! runs never leaves a kernel in the cache (or a vendored package) under the other version's
//! key, and the headers a compile reads are what the preprocessor (nvcc's line markers, NVRTC's
//! own reads) says, whatever form the `#include` takes; with real nvcc and NVRTC.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fatkit_tests::{fatkit_in_process, nvrtc_available, temp_dir, toolchain};

/// The kernels of each entry of a module's manifest: `(target, kernels)`.
fn entry_kernels(out: &Path, module: &str) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read(out.join(format!("{module}.manifest.json"))).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&text).unwrap();
    manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let kernels = e["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_owned())
                .collect();
            (e["target"].as_str().unwrap().to_owned(), kernels)
        })
        .collect()
}

/// An nvcc that runs the real one and, once (a marker file says it did), runs `edit` before
/// (`before`) or after it: an editor saving a file while the build runs.
fn editing_nvcc(dir: &Path, edit: &str, before: bool) -> PathBuf {
    let real = toolchain().unwrap().nvcc();
    let bin = dir.join("editing-cuda/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = dir.join("edited");
    let once = format!(
        "case \" $* \" in *\" -cubin \"*|*\" --fatbin \"*) if [ ! -e {m} ]; then touch {m}; {edit}; fi;; esac",
        m = marker.display()
    );
    let script = if before {
        format!("#!/bin/sh\n{once}\nexec {} \"$@\"\n", real.display())
    } else {
        format!(
            "#!/bin/sh\n{} \"$@\"\nstatus=$?\n{once}\nexit $status\n",
            real.display()
        )
    };
    let nvcc = bin.join("nvcc");
    std::fs::write(&nvcc, script).unwrap();
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    nvcc
}

/// A `cuda-src/k.cu` whose kernel is named by `name.h`, and a one-target profile.
fn named_kernel(dir: &Path) -> Vec<String> {
    let src = dir.join("cuda-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/one.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(src.join("name.h"), "#define NAME kernel_v1\n").unwrap();
    std::fs::write(
        src.join("k.cu"),
        "#include \"name.h\"\nextern \"C\" __global__ void NAME(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    fatkit_tests::build_kernels_args(dir, "one")
}

/// A header saved while its includer compiled: the compile read the old header, and was
/// stored under the new one's key, so every later build, into a fresh directory too, reused
/// the stale kernel. Now nothing is stored from a compile whose inputs changed under it (the
/// module fails, exit 1, saying so), and the next build compiles the header as it is.
#[test]
fn a_header_saved_while_its_includer_compiles_is_never_cached_as_the_new_one() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("hashed-header-edit");
    let mut args = named_kernel(&dir);
    let header = dir.join("cuda-src/name.h");
    let edit = format!("printf '#define NAME kernel_v2\\n' > {}", header.display());
    let nvcc = editing_nvcc(&dir, &edit, false);
    args.push(format!("--nvcc={}", nvcc.display()));
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("changed while the build ran"),
        "{out}{err}"
    );
    // A fresh output directory, the same cache: the kernel is the header's as it is now.
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = dir.join("out2").display().to_string();
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        entry_kernels(&dir.join("out2"), "k"),
        [("sm_90".to_owned(), vec!["kernel_v2".to_owned()])]
    );
}

/// A source edited after the build planned (hashed) it and before its compile: the compile
/// read the edit and was stored under the old key, so undoing the edit brought the edited
/// kernel back. Now nothing is stored; after the undo the kernel is the source's again.
#[test]
fn a_source_edited_before_its_compile_is_never_cached_under_its_old_key() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("hashed-source-edit");
    let mut args = named_kernel(&dir);
    let source = dir.join("cuda-src/k.cu");
    let original = std::fs::read_to_string(&source).unwrap();
    let edited = original.replace("NAME(", "kernel_edited(");
    let saved = dir.join("edited.cu");
    std::fs::write(&saved, &edited).unwrap();
    let edit = format!("cp {} {}", saved.display(), source.display());
    let nvcc = editing_nvcc(&dir, &edit, true);
    args.push(format!("--nvcc={}", nvcc.display()));
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("changed while the build ran"),
        "{out}{err}"
    );
    // The edit undone: the source as planned the first time compiles to its own kernel.
    std::fs::write(&source, &original).unwrap();
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        entry_kernels(&dir.join("out"), "k"),
        [("sm_90".to_owned(), vec!["kernel_v1".to_owned()])]
    );
}

/// The include forms a literal scan did not see: a macro naming the header, a comment in the
/// directive, a continued line, and a name the preprocessor makes by stringizing. Each
/// header names a kernel; editing it changes that kernel in every image, NVRTC's sm_70 and
/// nvcc's sm_80, and the vendored package's recorded inputs name all four, so that its
/// build-script check sees the edit.
#[test]
fn every_include_form_is_a_dependency_on_both_routes_and_in_a_vendored_package() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = temp_dir("hashed-include-forms");
    let kernels = dir.join("kernels");
    std::fs::create_dir_all(&kernels).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        dir.join("arch-profiles/old.toml"),
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    let headers = ["a.cuh", "b.cuh", "c.cuh", "d.cuh"];
    for h in headers {
        let stem = h.trim_end_matches(".cuh");
        std::fs::write(
            kernels.join(h),
            format!("#define KERNEL_{} {stem}_v1\n", stem.to_uppercase()),
        )
        .unwrap();
    }
    std::fs::write(
        kernels.join("k.cu"),
        "#define HDR \"a.cuh\"\n#include HDR\n#include /* b */ \"b.cuh\"\n#include \\\n  \"c.cuh\"\n#define STR_(x) #x\n#define STR(x) STR_(x)\n#include STR(d.cuh)\n\
         extern \"C\" __global__ void KERNEL_A(float* x) { x[0] = 1.0f; }\n\
         extern \"C\" __global__ void KERNEL_B(float* x) { x[0] = 2.0f; }\n\
         extern \"C\" __global__ void KERNEL_C(float* x) { x[0] = 3.0f; }\n\
         extern \"C\" __global__ void KERNEL_D(float* x) { x[0] = 4.0f; }\n",
    )
    .unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        "[package]\nname = \"forms\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"old\"\nsources = [\"kernels/k.cu\"]\nvendor = \"kernels/prebuilt\"\n\n[workspace]\n",
    )
    .unwrap();
    let build = || {
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
    };
    build();
    let prebuilt = kernels.join("prebuilt");
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(prebuilt.join("k.manifest.json")).unwrap()).unwrap();
    let files: Vec<&str> = recorded["inputs"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for h in headers {
        assert!(
            files.contains(&format!("kernels/{h}").as_str()),
            "{h} is not a recorded input: {files:?}"
        );
    }
    let config = serde_json::json!({
        "profile": "old",
        "sources": ["kernels/k.cu"],
        "vendor": "kernels/prebuilt",
    });
    let pkg = fatkit_package::workspace::kernel_package("forms", &manifest, &config).unwrap();
    for (i, h) in headers.iter().enumerate() {
        let stem = h.trim_end_matches(".cuh");
        std::fs::write(
            kernels.join(h),
            format!("#define KERNEL_{} {stem}_v2\n", stem.to_uppercase()),
        )
        .unwrap();
        // The vendored check sees the edit...
        let checked = fatkit_package::prebuilt::check_modules(
            &pkg,
            &prebuilt,
            None,
            fatkit_package::prebuilt::Mode::Vendored,
        );
        let why = format!("{:?}", checked.err());
        assert!(why.contains(&format!("kernels/{h} changed")), "{h}: {why}");
        // ...and the build compiles it on both routes.
        build();
        for (target, names) in entry_kernels(&prebuilt, "k") {
            for (j, other) in headers.iter().enumerate() {
                let other = other.trim_end_matches(".cuh");
                let version = if j <= i { "v2" } else { "v1" };
                assert!(
                    names.contains(&format!("{other}_{version}")),
                    "{target} after editing {h}: {names:?}"
                );
            }
        }
    }
}
