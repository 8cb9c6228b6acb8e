//! Pins of targets to toolchains over a profile's `[toolchain]` table: a package's
//! `[package.metadata.fatkit.toolchain]` and `Build::toolchain`.

use fatkit_arch::profile::Profile;

use fatkit_build::pipeline::BuildError;
use fatkit_package::workspace;

/// `[package.metadata.fatkit.toolchain]` over the profile's `[toolchain]`.
pub(super) fn pin_package_toolchains(
    pkg: &workspace::KernelPackage,
    profile: &mut Profile,
) -> Result<(), BuildError> {
    fatkit_build::resolve::pin_toolchains(&pkg.toolchain, profile).map_err(|why| {
        fatkit_build::refused::Refused::PackageToolchain {
            manifest: pkg.manifest_path.clone(),
            why,
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn package(
        dir: &Path,
        toolchain: serde_json::Value,
    ) -> Result<workspace::KernelPackage, String> {
        let config = serde_json::json!({ "sources": ["k.cu"], "toolchain": toolchain });
        workspace::kernel_package("p", &dir.join("Cargo.toml"), &config).map_err(|e| e.to_string())
    }

    /// A package pins a target as a profile's `[toolchain]` does, over the profile's own pin;
    /// a pin of a target outside the profile, one its toolchain cannot build, or one that does
    /// not parse is refused naming the table.
    #[test]
    fn a_package_pins_targets_without_a_profile_file() {
        let dir = std::env::temp_dir().join(format!("fatkit-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.cu"), "").unwrap();
        let text =
            "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n[toolchain]\nsm_70 = \"nvrtc 12.9\"\n";
        let profile = fatkit_package::profile::parse(Path::new("t.toml"), text).unwrap();
        let pin = |s: &str| s.parse::<fatkit_arch::Pin>().unwrap();
        let sm = |s: &str| s.parse::<fatkit_arch::Target>().unwrap();

        let pkg = package(&dir, serde_json::json!({ "sm_70": "nvcc 12.4" })).unwrap();
        let mut pinned = profile.clone();
        pin_package_toolchains(&pkg, &mut pinned).unwrap();
        assert_eq!(pinned.pins.get(&sm("sm_70")), Some(&pin("nvcc 12.4")));
        assert_eq!(profile.pins.get(&sm("sm_70")), Some(&pin("nvrtc 12.9")));
        assert!(pkg.config.contains("nvcc 12.4"), "{}", pkg.config);

        for (table, words) in [
            (
                serde_json::json!({ "sm_90": "nvcc 13.2" }),
                "[package.metadata.fatkit.toolchain]: sm_90 is not a target of the profile; name one of sm_70 sm_80",
            ),
            (
                serde_json::json!({ "sm_70": "nvcc 13.2" }),
                "[package.metadata.fatkit.toolchain]: nvcc 13.2 cannot build sm_70; pin a toolchain that builds it, or remove the pin",
            ),
        ] {
            let pkg = package(&dir, table).unwrap();
            let e = pin_package_toolchains(&pkg, &mut profile.clone())
                .unwrap_err()
                .to_string();
            assert!(e.ends_with(words), "{e}");
        }
        for table in [
            serde_json::json!({ "sm_7x": "nvcc 12.4" }),
            serde_json::json!({ "sm_70": "gcc 12" }),
        ] {
            let e = package(&dir, table.clone()).unwrap_err();
            assert!(e.contains("toolchain.sm_7"), "{table}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
