//! Directory grants as WASIX filesystems.
//!
//! Each grant is its own host filesystem rooted at the granted directory and
//! mounted at the guest path, so a guest path cannot name anything outside
//! its grant. A read-only grant is wrapped in [`ReadOnly`]: WASIX's
//! preopen rights alone let a guest create (empty) files in a directory
//! granted read-only, so the refusal is made where the host is touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use luge_core::{DirGrant, DirMode, SandboxError};
use virtual_fs::{
    FileOpener, FileSystem, FsError, Metadata, OpenOptions, OpenOptionsConfig, ReadDir,
    VirtualFile, host_fs, mount_fs::MountFileSystem,
};

/// Where grant `guest` is mounted in the sandbox's filesystem: the guest
/// path made absolute (`data` and `/data` are both `/data`).
pub fn mount_point(guest: &str) -> PathBuf {
    let trimmed = guest.trim_start_matches("./").trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        PathBuf::from("/")
    } else {
        PathBuf::from("/").join(trimmed)
    }
}

/// The sandbox filesystem for `grants`: each mounted at its
/// [`mount_point`], read-only ones wrapped.
pub fn mount(
    grants: &[DirGrant],
    io: &tokio::runtime::Handle,
) -> Result<Arc<dyn FileSystem + Send + Sync>, SandboxError> {
    let mounts = MountFileSystem::new();
    for grant in grants {
        let host = host_fs::FileSystem::new(io.clone(), grant.path()).map_err(|e| {
            SandboxError::Grant {
                guest: grant.guest.clone(),
                source: e.into(),
            }
        })?;
        let fs: Arc<dyn FileSystem + Send + Sync> = match grant.mode {
            DirMode::ReadWrite => Arc::new(host),
            DirMode::ReadOnly => Arc::new(ReadOnly(Arc::new(host))),
        };
        mounts
            .mount(mount_point(&grant.guest), fs)
            .map_err(|e| SandboxError::Grant {
                guest: grant.guest.clone(),
                source: e.into(),
            })?;
    }
    Ok(Arc::new(mounts))
}

/// A filesystem that reads through to another and refuses every change.
#[derive(Debug)]
pub struct ReadOnly(pub Arc<dyn FileSystem + Send + Sync>);

impl FileSystem for ReadOnly {
    fn readlink(&self, path: &Path) -> virtual_fs::Result<PathBuf> {
        self.0.readlink(path)
    }

    fn read_dir(&self, path: &Path) -> virtual_fs::Result<ReadDir> {
        self.0.read_dir(path)
    }

    fn create_dir(&self, _: &Path) -> virtual_fs::Result<()> {
        Err(FsError::PermissionDenied)
    }

    fn create_symlink(&self, _: &Path, _: &Path) -> virtual_fs::Result<()> {
        Err(FsError::PermissionDenied)
    }

    fn hard_link(&self, _: &Path, _: &Path) -> virtual_fs::Result<()> {
        Err(FsError::PermissionDenied)
    }

    fn remove_dir(&self, _: &Path) -> virtual_fs::Result<()> {
        Err(FsError::PermissionDenied)
    }

    fn rename<'a>(&'a self, _: &'a Path, _: &'a Path) -> BoxFuture<'a, virtual_fs::Result<()>> {
        Box::pin(async { Err(FsError::PermissionDenied) })
    }

    fn metadata(&self, path: &Path) -> virtual_fs::Result<Metadata> {
        self.0.metadata(path)
    }

    fn symlink_metadata(&self, path: &Path) -> virtual_fs::Result<Metadata> {
        self.0.symlink_metadata(path)
    }

    fn remove_file(&self, _: &Path) -> virtual_fs::Result<()> {
        Err(FsError::PermissionDenied)
    }

    fn new_open_options(&self) -> OpenOptions<'_> {
        OpenOptions::new(self)
    }
}

impl FileOpener for ReadOnly {
    fn open(
        &self,
        path: &Path,
        conf: &OpenOptionsConfig,
    ) -> virtual_fs::Result<Box<dyn VirtualFile + Send + Sync + 'static>> {
        if conf.write || conf.append || conf.truncate || conf.create || conf.create_new {
            return Err(FsError::PermissionDenied);
        }
        self.0.new_open_options().options(conf.clone()).open(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_mount_at_their_absolute_guest_path() {
        assert_eq!(mount_point("/data"), PathBuf::from("/data"));
        assert_eq!(mount_point("data"), PathBuf::from("/data"));
        assert_eq!(mount_point("./data/"), PathBuf::from("/data"));
        assert_eq!(mount_point("."), PathBuf::from("/"));
        assert_eq!(mount_point("/"), PathBuf::from("/"));
    }
}
