use std::{env, process};
use wasi_tests::root_directory;
use wasip1 as wasi;

unsafe fn test_fstflags_validate(dir_fd: wasi::Fd) {
    const FILE_NAME: &str = "fstflags_validate.cleanup";

    let file_fd = wasi::path_open(
        dir_fd,
        0,
        FILE_NAME,
        wasi::OFLAGS_CREAT,
        wasi::RIGHTS_FD_READ | wasi::RIGHTS_FD_FILESTAT_SET_TIMES,
        0,
        0,
    )
    .expect("failed to create file");

    let result = wasi::fd_filestat_set_times(
        file_fd,
        100,
        200,
        wasi::FSTFLAGS_MTIM | wasi::FSTFLAGS_MTIM_NOW,
    );
    assert!(
        matches!(result, Err(wasi::ERRNO_INVAL)),
        "bad error: {result:?}"
    );

    let result = wasi::fd_filestat_set_times(
        file_fd,
        100,
        200,
        wasi::FSTFLAGS_ATIM | wasi::FSTFLAGS_ATIM_NOW,
    );
    assert!(
        matches!(result, Err(wasi::ERRNO_INVAL)),
        "bad error: {result:?}"
    );

    wasi::fd_close(file_fd).expect("failed to close fd");
}
fn main() {
    let dir_fd = match root_directory() {
        Ok(dir_fd) => dir_fd,
        Err(err) => {
            eprintln!("{}", err);
            process::exit(1)
        }
    };

    // Run the tests.
    unsafe { test_fstflags_validate(dir_fd) }
}
