;; A wasi:http handler whose instantiation is slow: its core module's start
;; function counts to 30,000,000 (about 25 ms of guest work) before the
;; instance exists. Its handler sets no response (the client gets a 500,
;; the sandbox ends normally). The probe of a hostile tenant whose start
;; would run on a worker's idle time if its sandboxes were made ahead of
;; their requests (executor/tests/e2e/components.rs).
(component
  (type $types (instance
    (export "incoming-request" (type (sub resource)))
    (export "response-outparam" (type (sub resource)))
  ))
  (import "wasi:http/types@0.2.0" (instance $t (type $types)))
  (alias export $t "incoming-request" (type $incoming-request))
  (alias export $t "response-outparam" (type $response-outparam))
  (core module $m
    (func $start
      (local $i i32)
      (loop $count
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $count (i32.lt_u (local.get $i) (i32.const 30000000)))))
    (start $start)
    (func (export "handle") (param i32 i32)))
  (core instance $i (instantiate $m))
  (func $handle
    (param "request" (own $incoming-request))
    (param "response-out" (own $response-outparam))
    (canon lift (core func $i "handle")))
  (instance $h (export "handle" (func $handle)))
  (export "wasi:http/incoming-handler@0.2.0" (instance $h)))
