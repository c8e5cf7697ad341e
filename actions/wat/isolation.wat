;; The isolation probe (issue 26): one module that leaves a secret behind in
;; everything a sandbox owns, and looks for what an earlier sandbox left.
;; Pooled engines hand an ended sandbox's slot (memory, table, globals) to
;; the next: it must come back as fresh as a new instance.
;;
;; stdin, first bytes:
;;   "r"   read: grow to 256 pages (16 MiB, the most a writer uses; pages
;;         grown must be zero too), then answer "clean\n" if the memory
;;         past the scratch area, every table slot and the global are as a
;;         new instance has them, else "dirty\n" ("nogrow\n" if it cannot
;;         grow);
;;   "w" + how: fill the memory past the scratch area with 0xA5, every
;;         table slot with a function, the global with a value, then end:
;;     n  normally, at 4 pages;
;;     g  normally, grown to 256 pages first;
;;     t  with a trap;
;;     l  spinning until the time limit (or a cancellation) ends it;
;;     f  filling and copying 16 MiB again and again, so the time limit
;;        (or a preemption) lands in the middle of a memory.fill or
;;        memory.copy.
;;
;; The scratch area (bytes 0 to 1023) holds iovecs, stdin and the answers.
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 256)
  (table $table 16 funcref)
  (global $global (mut i64) (i64.const 0))
  (func $secret)
  (elem declare func $secret)
  (data (i32.const 96) "clean\n")
  (data (i32.const 104) "dirty\n")
  (data (i32.const 112) "nogrow\n")

  (func $say (param $at i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))

  ;; Grows the memory to $pages pages: 1 if it has them.
  (func $grow_to (param $pages i32) (result i32)
    (if (i32.lt_u (memory.size) (local.get $pages))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $pages) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (i32.const 1))

  (func $end_of_memory (result i32)
    (i32.mul (memory.size) (i32.const 65536)))

  (func $leave (param $pages i32)
    (drop (call $grow_to (local.get $pages)))
    (memory.fill (i32.const 1024) (i32.const 0xA5)
      (i32.sub (call $end_of_memory) (i32.const 1024)))
    (table.fill $table (i32.const 0) (ref.func $secret) (table.size $table))
    (global.set $global (i64.const 0x5EC12E7)))

  ;; 1 if nothing of an earlier sandbox is visible.
  (func $clean (result i32)
    (local $i i32) (local $p i32) (local $end i32)
    (if (i64.ne (global.get $global) (i64.const 0)) (then (return (i32.const 0))))
    (block $tables_done
      (loop $tables
        (br_if $tables_done (i32.ge_u (local.get $i) (table.size $table)))
        (if (i32.eqz (ref.is_null (table.get $table (local.get $i))))
          (then (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $tables)))
    (local.set $p (i32.const 1024))
    (local.set $end (call $end_of_memory))
    (block $memory_done
      (loop $memory
        (br_if $memory_done (i32.ge_u (local.get $p) (local.get $end)))
        (if (i64.ne (i64.load (local.get $p)) (i64.const 0))
          (then (return (i32.const 0))))
        (local.set $p (i32.add (local.get $p) (i32.const 8)))
        (br $memory)))
    (i32.const 1))

  (func (export "_start")
    (local $how i32)
    ;; Up to 8 bytes of stdin at 64.
    (i32.store (i32.const 16) (i32.const 64))
    (i32.store (i32.const 20) (i32.const 8))
    (drop (call $fd_read (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 24)))
    (if (i32.eq (i32.load8_u (i32.const 64)) (i32.const 0x72)) ;; "r"
      (then
        (if (i32.eqz (call $grow_to (i32.const 256)))
          (then (call $say (i32.const 112) (i32.const 7)) (return)))
        (if (call $clean)
          (then (call $say (i32.const 96) (i32.const 6)))
          (else (call $say (i32.const 104) (i32.const 6))))
        (return)))
    (local.set $how (i32.load8_u (i32.const 65)))
    (call $leave
      (if (result i32) (i32.eq (local.get $how) (i32.const 0x67)) ;; "g"
        (then (i32.const 256))
        (else (i32.const 4))))
    (if (i32.eq (local.get $how) (i32.const 0x74)) ;; "t"
      (then unreachable))
    (if (i32.eq (local.get $how) (i32.const 0x6c)) ;; "l"
      (then (loop $spin (br $spin))))
    (if (i32.eq (local.get $how) (i32.const 0x66)) ;; "f"
      (then
        (drop (call $grow_to (i32.const 256)))
        (loop $fill
          (memory.fill (i32.const 1024) (i32.const 0x5A)
            (i32.sub (call $end_of_memory) (i32.const 1024)))
          (memory.copy (i32.const 1024) (i32.const 8388608) (i32.const 8387584))
          (br $fill)))))
)
