//! Reading a workspace with `cargo metadata` ([`discover`]: it runs cargo, so it lives here);
//! what it reads, `[package.metadata.fatkit]` and the workspace, is
//! [`fatkit_package::workspace`]'s.

use std::path::Path;

use fatkit_package::workspace::{kernel_package, Binary, KernelPackage, Workspace, WorkspaceError};

fn all_bins(meta: &cargo_metadata::Metadata) -> Vec<String> {
    meta.workspace_packages()
        .iter()
        .flat_map(|p| p.targets.iter())
        .filter(|t| t.is_bin())
        .map(|t| t.name.clone())
        .collect()
}

/// Reads the workspace containing `dir` (`cargo metadata --no-deps`).
pub fn discover(dir: &Path) -> Result<Workspace, WorkspaceError> {
    let failed = |message: String| WorkspaceError::Metadata {
        dir: dir.to_owned(),
        message: message.lines().next().unwrap_or_default().to_owned(),
    };
    let mut cmd = cargo_metadata::MetadataCommand::new()
        .current_dir(dir)
        .no_deps()
        .cargo_command();
    let out =
        fatkit_toolchain::command::output_of(&mut cmd, fatkit_toolchain::command::How::QUERY, "")
            .map_err(|e| failed(format!("`{}` {}: {}", e.command, e.status, e.output)))?;
    if !out.status.success() {
        // As cargo_metadata reports it: cargo's own error.
        return Err(failed(format!(
            "`cargo metadata` exited with an error: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let meta = cargo_metadata::MetadataCommand::parse(String::from_utf8_lossy(&out.stdout))
        .map_err(|e| failed(e.to_string()))?;
    let root = meta.workspace_root.clone().into_std_path_buf();
    let ws_fatkit = meta.workspace_metadata.get("fatkit");
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+');
    let given = ws_fatkit
        .and_then(|f| f.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_owned);
    let name = match given {
        Some(name) if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) => {
            return Err(WorkspaceError::Invalid {
                manifest: root.join("Cargo.toml"),
                package: "[workspace.metadata.fatkit]".to_owned(),
                message: format!(
                    "name = {name:?} cannot name the release archive (dist/<name>-<version>-<host>.tar.gz); use ASCII letters, digits, '.', '_', '-' and '+', not starting with '.'"
                ),
            });
        }
        Some(name) => name,
        // The directory's name, made one.
        None => root
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .chars()
                    .map(|c| if plain(c) { c } else { '_' })
                    .collect::<String>()
                    .trim_start_matches('.')
                    .to_owned()
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "workspace".to_owned()),
    };
    let wanted: Option<Vec<String>> = ws_fatkit
        .and_then(|f| f.get("package"))
        .and_then(|p| p.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        });
    let (kernel_packages, binaries) = members(&meta, &root, wanted.as_deref())?;
    let launcher = fatkit_package::workspace::metadata_launcher(
        ws_fatkit
            .and_then(|f| f.get("launcher"))
            .and_then(|l| l.as_str())
            .map(str::to_owned),
    )
    .map_err(|message| WorkspaceError::Invalid {
        manifest: root.join("Cargo.toml"),
        package: "[workspace.metadata.fatkit]".to_owned(),
        message,
    })?;
    Ok(Workspace {
        root,
        target_dir: meta.target_directory.into_std_path_buf(),
        name,
        kernel_packages,
        binaries,
        launcher,
    })
}

/// The workspace members' kernel packages and the binaries `package` ships: those `wanted`
/// lists (each must be a binary of a member), else every binary of a member that publishes.
fn members(
    meta: &cargo_metadata::Metadata,
    root: &Path,
    wanted: Option<&[String]>,
) -> Result<(Vec<KernelPackage>, Vec<Binary>), WorkspaceError> {
    let mut kernel_packages = Vec::new();
    let mut binaries = Vec::new();
    let mut members: Vec<&cargo_metadata::Package> = meta.workspace_packages();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    for package in members {
        let manifest_path = package.manifest_path.clone().into_std_path_buf();
        let publishes = package.publish.as_ref().is_none_or(|p| !p.is_empty());
        for target in &package.targets {
            if !target.is_bin() {
                continue;
            }
            let ship = match wanted {
                Some(list) => list.contains(&target.name),
                None => publishes,
            };
            if ship {
                binaries.push(Binary {
                    name: target.name.clone(),
                    package: package.name.to_string(),
                    version: package.version.to_string(),
                });
            }
        }
        let Some(config) = package.metadata.get("fatkit") else {
            continue;
        };
        kernel_packages.push(kernel_package(
            package.name.as_ref(),
            &manifest_path,
            config,
        )?);
    }
    if let Some(list) = wanted {
        for name in list {
            if !binaries.iter().any(|b| &b.name == name) {
                return Err(WorkspaceError::Invalid {
                    manifest: root.join("Cargo.toml"),
                    package: "(workspace)".to_owned(),
                    message: format!(
                        "[workspace.metadata.fatkit] package lists '{name}', which is no binary of a workspace member; name one of {}",
                        all_bins(meta).join(", ")
                    ),
                });
            }
        }
    }
    Ok((kernel_packages, binaries))
}
