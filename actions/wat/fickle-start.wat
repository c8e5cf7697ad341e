;; A wasi:http handler whose start is quick one time in four and about
;; 25 ms of guest work otherwise (it counts to 30,000,000, more than twice
;; the 10 ms at which a debug build of Luge interrupts a preparation),
;; chosen by wasi:random: a hostile tenant's way to pass for a quick
;; handler on demand and run its slow start on a worker's idle time if its
;; sandboxes were made ahead (executor/tests/e2e/components.rs). Its
;; handler sets no response (the client gets a 500, the sandbox ends
;; normally).
(component
  (type $types (instance
    (export "incoming-request" (type (sub resource)))
    (export "response-outparam" (type (sub resource)))
  ))
  (import "wasi:http/types@0.2.0" (instance $t (type $types)))
  (alias export $t "incoming-request" (type $incoming-request))
  (alias export $t "response-outparam" (type $response-outparam))
  (import "wasi:random/random@0.2.0" (instance $random
    (export "get-random-u64" (func (result u64)))))
  (core func $u64 (canon lower (func $random "get-random-u64")))
  (core module $m
    (import "random" "u64" (func $u64 (result i64)))
    (func $start
      (local $i i32)
      (if (i64.eqz (i64.and (call $u64) (i64.const 3)))
        (then (return)))
      (loop $count
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $count (i32.lt_u (local.get $i) (i32.const 30000000)))))
    (start $start)
    (func (export "handle") (param i32 i32)))
  (core instance $random-core (export "u64" (func $u64)))
  (core instance $i (instantiate $m (with "random" (instance $random-core))))
  (func $handle
    (param "request" (own $incoming-request))
    (param "response-out" (own $response-outparam))
    (canon lift (core func $i "handle")))
  (instance $h (export "handle" (func $handle)))
  (export "wasi:http/incoming-handler@0.2.0" (instance $h)))
