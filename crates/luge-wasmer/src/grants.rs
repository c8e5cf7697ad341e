//! Directory grants as WASIX filesystems.
//!
//! Each grant is its own host filesystem rooted at the granted directory and
//! mounted at the guest path, so a guest path cannot name anything outside
//! its grant. A read-only grant is wrapped in [`ReadOnly`]: WASIX's
//! preopen rights alone let a guest create (empty) files in a directory
//! granted read-only, so the refusal is made where the host is touched.
//! A read-write grant is wrapped in [`WriteThrough`]: the host filesystem's
//! files (tokio's) acknowledge a write once it is buffered and report its
//! failure, a full disk among them, on the next operation or never (a
//! close does not flush), so a guest was told its bytes were written when
//! they were not. Each write now waits for the bytes to reach the OS and
//! returns the OS's error.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

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
            DirMode::ReadWrite => Arc::new(WriteThrough(Arc::new(host))),
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

/// A filesystem whose files' writes reach the OS before they are
/// acknowledged (see the module's doc).
#[derive(Debug)]
pub struct WriteThrough(pub Arc<dyn FileSystem + Send + Sync>);

impl FileSystem for WriteThrough {
    fn readlink(&self, path: &Path) -> virtual_fs::Result<PathBuf> {
        self.0.readlink(path)
    }

    fn read_dir(&self, path: &Path) -> virtual_fs::Result<ReadDir> {
        self.0.read_dir(path)
    }

    fn create_dir(&self, path: &Path) -> virtual_fs::Result<()> {
        self.0.create_dir(path)
    }

    fn create_symlink(&self, source: &Path, target: &Path) -> virtual_fs::Result<()> {
        self.0.create_symlink(source, target)
    }

    fn hard_link(&self, source: &Path, target: &Path) -> virtual_fs::Result<()> {
        self.0.hard_link(source, target)
    }

    fn remove_dir(&self, path: &Path) -> virtual_fs::Result<()> {
        self.0.remove_dir(path)
    }

    fn rename<'a>(&'a self, from: &'a Path, to: &'a Path) -> BoxFuture<'a, virtual_fs::Result<()>> {
        self.0.rename(from, to)
    }

    fn metadata(&self, path: &Path) -> virtual_fs::Result<Metadata> {
        self.0.metadata(path)
    }

    fn symlink_metadata(&self, path: &Path) -> virtual_fs::Result<Metadata> {
        self.0.symlink_metadata(path)
    }

    fn remove_file(&self, path: &Path) -> virtual_fs::Result<()> {
        self.0.remove_file(path)
    }

    fn new_open_options(&self) -> OpenOptions<'_> {
        OpenOptions::new(self)
    }
}

impl FileOpener for WriteThrough {
    fn open(
        &self,
        path: &Path,
        conf: &OpenOptionsConfig,
    ) -> virtual_fs::Result<Box<dyn VirtualFile + Send + Sync + 'static>> {
        let file = self.0.new_open_options().options(conf.clone()).open(path)?;
        Ok(Box::new(Flushed {
            file,
            accepted: None,
        }))
    }
}

/// A file whose every write is flushed before it is acknowledged.
#[derive(Debug)]
struct Flushed {
    file: Box<dyn VirtualFile + Send + Sync + 'static>,
    /// Bytes the file took and is flushing: answered once flushed (a
    /// caller polls a pending write again with the same buffer).
    accepted: Option<usize>,
}

impl tokio::io::AsyncWrite for Flushed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let accepted = match this.accepted {
            Some(n) => n,
            None => {
                let n = ready!(Pin::new(&mut this.file).poll_write(cx, buf))?;
                this.accepted = Some(n);
                n
            }
        };
        let flushed = ready!(Pin::new(&mut this.file).poll_flush(cx));
        this.accepted = None;
        Poll::Ready(flushed.map(|()| accepted))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

impl tokio::io::AsyncRead for Flushed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncSeek for Flushed {
    fn start_seek(mut self: Pin<&mut Self>, position: std::io::SeekFrom) -> std::io::Result<()> {
        Pin::new(&mut self.file).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        Pin::new(&mut self.file).poll_complete(cx)
    }
}

impl VirtualFile for Flushed {
    fn last_accessed(&self) -> u64 {
        self.file.last_accessed()
    }

    fn last_modified(&self) -> u64 {
        self.file.last_modified()
    }

    fn created_time(&self) -> u64 {
        self.file.created_time()
    }

    fn set_times(&mut self, atime: Option<u64>, mtime: Option<u64>) -> virtual_fs::Result<()> {
        self.file.set_times(atime, mtime)
    }

    fn size(&self) -> u64 {
        self.file.size()
    }

    fn set_len(&mut self, new_size: u64) -> virtual_fs::Result<()> {
        self.file.set_len(new_size)
    }

    fn unlink(&mut self) -> virtual_fs::Result<()> {
        self.file.unlink()
    }

    fn is_open(&self) -> bool {
        self.file.is_open()
    }

    fn get_special_fd(&self) -> Option<u32> {
        self.file.get_special_fd()
    }

    fn poll_read_ready(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.file).poll_read_ready(cx)
    }

    fn poll_write_ready(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.file).poll_write_ready(cx)
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
