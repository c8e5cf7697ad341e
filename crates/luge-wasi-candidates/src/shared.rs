//! What WASI's release candidates served here ([`crate::wasi_2023_10_18`],
//! [`crate::wasi_2023_11_10`]) share, written once: their `wasi:io` streams
//! and the functions alike to the letter in both (the same functions over
//! the same resources), each forwarded to WASI
//! 0.2's implementation. Expanded in each candidate's module, where its
//! generated `wasi::io::streams` and its `latest` (Wasmtime's 0.2
//! bindings) are in scope.

/// The candidate's generated bindings, as `mod bindings`: its `world`
/// (a `wasi:http/proxy` of the candidate's version), with the functions
/// both candidates make async and the resources both take from WASI 0.2
/// (Wasmtime's `latest` bindings), plus each candidate's own `imports`
/// and `with` rows.
macro_rules! bindings {
    (world: $world:tt, imports: { $($imports:tt)* }, with: { $($with:tt)* },) => {
        #[allow(missing_docs)] // generated
        mod bindings {
            use super::latest;

            wasmtime::component::bindgen!({
                path: "../../wit",
                world: $world,
                imports: {
                    "wasi:io/streams.[drop]input-stream": async | trappable,
                    "wasi:io/streams.[drop]output-stream": async | trappable,
                    "wasi:io/streams.[method]input-stream.blocking-read": async | trappable,
                    "wasi:io/streams.[method]input-stream.blocking-skip": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-splice": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-flush": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-write-and-flush": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-write-zeroes-and-flush": async | trappable,
                    $($imports)*
                    default: trappable,
                },
                exports: { default: async },
                require_store_data_send: true,
                with: {
                    "wasi:io/poll.pollable": latest::io::poll::Pollable,
                    "wasi:io/streams.input-stream": latest::io::streams::InputStream,
                    "wasi:io/streams.output-stream": latest::io::streams::OutputStream,
                    "wasi:http/types.incoming-response": latest::http::types::IncomingResponse,
                    "wasi:http/types.incoming-request": latest::http::types::IncomingRequest,
                    "wasi:http/types.incoming-body": latest::http::types::IncomingBody,
                    "wasi:http/types.outgoing-response": latest::http::types::OutgoingResponse,
                    "wasi:http/types.outgoing-request": latest::http::types::OutgoingRequest,
                    "wasi:http/types.outgoing-body": latest::http::types::OutgoingBody,
                    "wasi:http/types.fields": latest::http::types::Fields,
                    "wasi:http/types.response-outparam": latest::http::types::ResponseOutparam,
                    "wasi:http/types.future-incoming-response": latest::http::types::FutureIncomingResponse,
                    "wasi:http/types.future-trailers": latest::http::types::FutureTrailers,
                    $($with)*
                },
            });
        }
    };
}

pub(crate) use bindings;

/// The candidate's `wasi:io/streams` on the resource table: the input and
/// output streams' functions (with `$output_stream_extra`, the output
/// stream's functions one candidate has alone) and the conversion of a
/// 0.2 stream result to the candidate's.
macro_rules! io_streams {
    ($($output_stream_extra:tt)*) => {
        fn convert_stream_result<T, T2>(
            table: &mut ResourceTable,
            result: Result<T, wasmtime_wasi::p2::StreamError>,
        ) -> wasmtime::Result<Result<T2, StreamError>>
        where
            T2: From<T>,
        {
            match result {
                Ok(e) => Ok(Ok(e.into())),
                Err(wasmtime_wasi::p2::StreamError::Closed) => Ok(Err(StreamError::Closed)),
                Err(wasmtime_wasi::p2::StreamError::LastOperationFailed(e)) => {
                    let e = table.push(e)?;
                    Ok(Err(StreamError::LastOperationFailed(e)))
                }
                Err(wasmtime_wasi::p2::StreamError::Trap(e)) => Err(e),
            }
        }

        impl wasi::io::streams::Host for ResourceTable {}

        impl wasi::io::streams::HostInputStream for ResourceTable {
            fn read(
                &mut self,
                self_: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<Vec<u8>, StreamError>> {
                let result = latest::io::streams::HostInputStream::read(self, self_, len);
                convert_stream_result(self, result)
            }

            async fn blocking_read(
                &mut self,
                self_: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<Vec<u8>, StreamError>> {
                let result = latest::io::streams::HostInputStream::blocking_read(self, self_, len).await;
                convert_stream_result(self, result)
            }

            fn skip(
                &mut self,
                self_: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<u64, StreamError>> {
                let result = latest::io::streams::HostInputStream::skip(self, self_, len);
                convert_stream_result(self, result)
            }

            async fn blocking_skip(
                &mut self,
                self_: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<u64, StreamError>> {
                let result = latest::io::streams::HostInputStream::blocking_skip(self, self_, len).await;
                convert_stream_result(self, result)
            }

            fn subscribe(&mut self, self_: Resource<InputStream>) -> wasmtime::Result<Resource<Pollable>> {
                latest::io::streams::HostInputStream::subscribe(self, self_)
            }

            async fn drop(&mut self, rep: Resource<InputStream>) -> wasmtime::Result<()> {
                latest::io::streams::HostInputStream::drop(self, rep).await
            }
        }

        impl wasi::io::streams::HostOutputStream for ResourceTable {
            fn check_write(
                &mut self,
                self_: Resource<OutputStream>,
            ) -> wasmtime::Result<Result<u64, StreamError>> {
                let result = latest::io::streams::HostOutputStream::check_write(self, self_);
                convert_stream_result(self, result)
            }

            fn write(
                &mut self,
                self_: Resource<OutputStream>,
                contents: Vec<u8>,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result = latest::io::streams::HostOutputStream::write(self, self_, contents);
                convert_stream_result(self, result)
            }

            async fn blocking_write_and_flush(
                &mut self,
                self_: Resource<OutputStream>,
                contents: Vec<u8>,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result =
                    latest::io::streams::HostOutputStream::blocking_write_and_flush(self, self_, contents)
                        .await;
                convert_stream_result(self, result)
            }

            fn flush(
                &mut self,
                self_: Resource<OutputStream>,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result = latest::io::streams::HostOutputStream::flush(self, self_);
                convert_stream_result(self, result)
            }

            async fn blocking_flush(
                &mut self,
                self_: Resource<OutputStream>,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result = latest::io::streams::HostOutputStream::blocking_flush(self, self_).await;
                convert_stream_result(self, result)
            }

            fn subscribe(&mut self, self_: Resource<OutputStream>) -> wasmtime::Result<Resource<Pollable>> {
                latest::io::streams::HostOutputStream::subscribe(self, self_)
            }

            fn write_zeroes(
                &mut self,
                self_: Resource<OutputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result = latest::io::streams::HostOutputStream::write_zeroes(self, self_, len);
                convert_stream_result(self, result)
            }

            async fn blocking_write_zeroes_and_flush(
                &mut self,
                self_: Resource<OutputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<(), StreamError>> {
                let result = latest::io::streams::HostOutputStream::blocking_write_zeroes_and_flush(
                    self, self_, len,
                )
                .await;
                convert_stream_result(self, result)
            }

            fn splice(
                &mut self,
                self_: Resource<OutputStream>,
                src: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<u64, StreamError>> {
                let result = latest::io::streams::HostOutputStream::splice(self, self_, src, len);
                convert_stream_result(self, result)
            }

            async fn blocking_splice(
                &mut self,
                self_: Resource<OutputStream>,
                src: Resource<InputStream>,
                len: u64,
            ) -> wasmtime::Result<Result<u64, StreamError>> {
                let result =
                    latest::io::streams::HostOutputStream::blocking_splice(self, self_, src, len).await;
                convert_stream_result(self, result)
            }

            async fn drop(&mut self, rep: Resource<OutputStream>) -> wasmtime::Result<()> {
                latest::io::streams::HostOutputStream::drop(self, rep).await
            }

                $($output_stream_extra)*
            }
    };
}

pub(crate) use io_streams;

/// What the candidates' other interfaces have alike, to the letter: the
/// incoming request, response and body of `wasi:http/types`, the wall
/// clock (and its `datetime`), `wasi:random/random` and the `wasi:cli` stdio getters.
macro_rules! alike {
    () => {
        $crate::shared::convert! {
            struct latest::clocks::wall_clock::Datetime [<=>] Datetime {
                seconds,
                nanoseconds,
            }
        }

        impl wasi::http::types::HostIncomingRequest for WasiHttpCtxView<'_> {
            $crate::shared::forward!(HostIncomingRequest, IncomingRequest:
                path_with_query() -> Option<String>;
                authority() -> Option<String>;
                headers() -> Resource<Headers>;
                consume() -> Result<Resource<IncomingBody>, ()>;
                drop() -> ();
            );

            fn method(&mut self, self_: Resource<IncomingRequest>) -> wasmtime::Result<Method> {
                latest::http::types::HostIncomingRequest::method(self, self_).map(|e| e.into())
            }

            fn scheme(
                &mut self,
                self_: Resource<IncomingRequest>,
            ) -> wasmtime::Result<Option<Scheme>> {
                latest::http::types::HostIncomingRequest::scheme(self, self_)
                    .map(|e| e.map(|e| e.into()))
            }
        }

        impl wasi::http::types::HostIncomingResponse for WasiHttpCtxView<'_> {
            $crate::shared::forward!(HostIncomingResponse, IncomingResponse:
                status() -> StatusCode;
                headers() -> Resource<Headers>;
                consume() -> Result<Resource<IncomingBody>, ()>;
                drop() -> ();
            );
        }

        impl wasi::http::types::HostIncomingBody for WasiHttpCtxView<'_> {
            $crate::shared::forward!(HostIncomingBody, IncomingBody:
                stream() -> Result<Resource<InputStream>, ()>;
                finish() -> Resource<FutureTrailers>;
                drop() -> ();
            );
        }

        impl wasi::clocks::wall_clock::Host for WasiClocksCtxView<'_> {
            fn now(&mut self) -> wasmtime::Result<Datetime> {
                Ok(latest::clocks::wall_clock::Host::now(self)?.into())
            }

            fn resolution(&mut self) -> wasmtime::Result<Datetime> {
                Ok(latest::clocks::wall_clock::Host::resolution(self)?.into())
            }
        }

        impl wasi::random::random::Host for WasiRandomCtx {
            fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
                latest::random::random::Host::get_random_bytes(self, len)
            }

            fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
                latest::random::random::Host::get_random_u64(self)
            }
        }

        impl wasi::cli::stdin::Host for WasiCliCtxView<'_> {
            fn get_stdin(&mut self) -> wasmtime::Result<Resource<InputStream>> {
                latest::cli::stdin::Host::get_stdin(self)
            }
        }

        impl wasi::cli::stdout::Host for WasiCliCtxView<'_> {
            fn get_stdout(&mut self) -> wasmtime::Result<Resource<OutputStream>> {
                latest::cli::stdout::Host::get_stdout(self)
            }
        }

        impl wasi::cli::stderr::Host for WasiCliCtxView<'_> {
            fn get_stderr(&mut self) -> wasmtime::Result<Resource<OutputStream>> {
                latest::cli::stderr::Host::get_stderr(self)
            }
        }
    };
}

pub(crate) use alike;

/// Methods of a candidate's `wasi:http/types` resource that hand their
/// resource and arguments on, unchanged, to 0.2's method of the same trait
/// (`name as latest_name` where 0.2 renamed it): one row a method,
/// `name(argument: Type, ...) -> Returned;`, in the candidate's `impl`.
macro_rules! forward {
    ($trait:ident, $resource:ty: $($name:ident $(as $latest:ident)? ($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $($crate::shared::forward!(@one $trait, $resource, $name [$($latest)? $name] ($($arg: $ty),*) -> $ret);)*
    };
    (@one $trait:ident, $resource:ty, $name:ident [$latest:ident $($_same:ident)?] ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        fn $name(&mut self, self_: Resource<$resource>, $($arg: $ty),*) -> wasmtime::Result<$ret> {
            latest::http::types::$trait::$latest(self, self_, $($arg),*)
        }
    };
}
pub(crate) use forward;

/// A guest's milliseconds as WASI 0.2's nanoseconds; past `u64` the
/// longest wait there is.
pub(crate) fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// WASI 0.2's nanoseconds as a candidate's milliseconds.
pub(crate) fn ns_to_ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// `From` both ways between a 0.2 type and the candidate's of the same
/// shape (Spin's `convert!`, trimmed to what the candidates convert).
macro_rules! convert {
    () => {};
    ($kind:ident $from:path [<=>] $to:path { $($body:tt)* } $($rest:tt)*) => {
        $crate::shared::convert!($kind $from => $to { $($body)* });
        $crate::shared::convert!($kind $to => $from { $($body)* });
        $crate::shared::convert!($($rest)*);
    };
    (struct $from:ty => $to:path { $($field:ident,)* } $($rest:tt)*) => {
        impl From<$from> for $to {
            fn from(e: $from) -> $to {
                $to {
                    $( $field: e.$field.into(), )*
                }
            }
        }
        $crate::shared::convert!($($rest)*);
    };
    (enum $from:path => $to:path { $($variant:ident $(($e:ident))?,)* } $($rest:tt)*) => {
        impl From<$from> for $to {
            fn from(e: $from) -> $to {
                use $from as A;
                use $to as B;
                match e {
                    $(
                        A::$variant $(($e))? => B::$variant $(($e.into()))?,
                    )*
                }
            }
        }
        $crate::shared::convert!($($rest)*);
    };
}
pub(crate) use convert;

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest's milliseconds are WASI 0.2's nanoseconds, checked: the
    /// largest is the longest wait, never an overflow; and back.
    #[test]
    fn timeouts_convert_between_milliseconds_and_nanoseconds() {
        assert_eq!(ms_to_ns(1_000), 1_000_000_000);
        assert_eq!(ms_to_ns(u64::MAX), u64::MAX);
        assert_eq!(ns_to_ms(ms_to_ns(18_446_744_073)), 18_446_744_073);
        assert_eq!(ns_to_ms(999_999), 0);
    }
}
