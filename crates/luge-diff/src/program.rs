//! Structured programs: WASI command modules that follow the function ABI
//! (read stdin, write stdout, return or `proc_exit`) and exercise what the
//! engines implement each in their own way: integer and float arithmetic
//! with every trapping case, loads and stores at the edges of memory,
//! `memory.grow` within and past the limits, bulk memory (`fill`, `copy`,
//! `init`, `data.drop`), direct and indirect calls (null slots, type
//! mismatches, out-of-range indices), bounded recursion and recursion deep
//! enough to exhaust any stack, `proc_exit` with any status, and loops
//! that run into the time limit.
//!
//! Every result is written to stdout as it is computed (8 bytes per
//! statement), so a run that traps half-way still shows how far it got,
//! and engines must agree on that prefix too. Floats leave as bits with
//! NaNs canonicalized: the sign and payload of a NaN that arithmetic makes
//! are not fixed by the spec, and no instruction here can observe them
//! (no `copysign` from a computed value, no float stores).

use rand::Rng;
use rand::rngs::SmallRng;
use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, DataCountSection, DataSection, ElementSection, Elements,
    EntityType, ExportKind, ExportSection, Function, FunctionSection, GlobalSection, GlobalType,
    ImportSection, InstructionSink, MemArg, MemorySection, MemoryType, Module, RefType,
    TableSection, TableType, TypeSection, ValType,
};

/// A generated program and how it is to be run.
#[derive(Debug, Clone)]
pub struct Program {
    /// The module.
    pub wasm: Vec<u8>,
    /// Its stdin.
    pub stdin: Vec<u8>,
    /// Whether it ends in a loop that never stops (run it with a short
    /// time limit: every engine must stop it there).
    pub spins: bool,
}

/// The memory limit programs run under: 128 pages.
pub const MEMORY_LIMIT: u64 = 8 << 20;

/// One instruction without immediates, as [`InstructionSink`] adds it.
type Op<'a> = for<'b> fn(&'b mut InstructionSink<'a>) -> &'b mut InstructionSink<'a>;

/// The i64 binary operators the generator picks from.
fn i64_binary<'a>() -> [Op<'a>; 15] {
    [
        InstructionSink::i64_add,
        InstructionSink::i64_sub,
        InstructionSink::i64_mul,
        InstructionSink::i64_div_s,
        InstructionSink::i64_div_u,
        InstructionSink::i64_rem_s,
        InstructionSink::i64_rem_u,
        InstructionSink::i64_and,
        InstructionSink::i64_or,
        InstructionSink::i64_xor,
        InstructionSink::i64_shl,
        InstructionSink::i64_shr_s,
        InstructionSink::i64_shr_u,
        InstructionSink::i64_rotl,
        InstructionSink::i64_rotr,
    ]
}

/// The i64 unary operators (sign extensions among them) the generator picks from.
fn i64_unary<'a>() -> [Op<'a>; 6] {
    [
        InstructionSink::i64_clz,
        InstructionSink::i64_ctz,
        InstructionSink::i64_popcnt,
        InstructionSink::i64_extend8_s,
        InstructionSink::i64_extend16_s,
        InstructionSink::i64_extend32_s,
    ]
}

/// The i64 comparisons (each gives an i32) the generator picks from.
fn i64_compare<'a>() -> [Op<'a>; 6] {
    [
        InstructionSink::i64_lt_s,
        InstructionSink::i64_lt_u,
        InstructionSink::i64_ge_s,
        InstructionSink::i64_eq,
        InstructionSink::i64_ne,
        InstructionSink::i64_gt_u,
    ]
}

/// The i32 binary operators the generator picks from.
fn i32_binary<'a>() -> [Op<'a>; 12] {
    [
        InstructionSink::i32_add,
        InstructionSink::i32_sub,
        InstructionSink::i32_mul,
        InstructionSink::i32_div_s,
        InstructionSink::i32_div_u,
        InstructionSink::i32_rem_s,
        InstructionSink::i32_rem_u,
        InstructionSink::i32_and,
        InstructionSink::i32_xor,
        InstructionSink::i32_shl,
        InstructionSink::i32_shr_s,
        InstructionSink::i32_rotl,
    ]
}

/// The f64 binary operators the generator picks from.
fn f64_binary<'a>() -> [Op<'a>; 6] {
    [
        InstructionSink::f64_add,
        InstructionSink::f64_sub,
        InstructionSink::f64_mul,
        InstructionSink::f64_div,
        InstructionSink::f64_min,
        InstructionSink::f64_max,
    ]
}

/// The f64 unary operators the generator picks from.
fn f64_unary<'a>() -> [Op<'a>; 7] {
    [
        InstructionSink::f64_sqrt,
        InstructionSink::f64_floor,
        InstructionSink::f64_ceil,
        InstructionSink::f64_trunc,
        InstructionSink::f64_nearest,
        InstructionSink::f64_abs,
        InstructionSink::f64_neg,
    ]
}

const PAGE: u32 = 65536;
// Memory layout: the iovec and the written count at 0, stdin at 64, the
// output word at 1024, initial data at 2048.
const IOVEC: i32 = 0;
const WRITTEN: i32 = 16;
const STDIN: i32 = 64;
const STDIN_LEN: i32 = 256;
const OUT: i32 = 1024;
const DATA: u32 = 2048;
const PASSIVE_LEN: u32 = 32;
/// The canonical NaN's bits, what any NaN is written as.
const CANONICAL_NAN: i64 = 0x7ff8_0000_0000_0000;

// Types.
const T_IO: u32 = 0; // fd_write, fd_read: (i32, i32, i32, i32) -> i32
const T_EXIT: u32 = 1; // proc_exit: (i32) -> ()
const T_START: u32 = 2; // () -> ()
const T_HELPER: u32 = 3; // (x: i64, depth: i32) -> i64
const T_OTHER: u32 = 4; // (i32) -> i32, in the table to mismatch
// Imported functions.
const F_WRITE: u32 = 0;
const F_READ: u32 = 1;
const F_EXIT: u32 = 2;
const F_START: u32 = 3;
const FIRST_HELPER: u32 = 4;

/// Generates one program from `rng`.
pub fn generate(rng: &mut SmallRng) -> Program {
    let helpers = rng.random_range(1..=4u32);
    let others = 1u32;
    let table_len = rng.random_range(2..=8u32);
    let pages = rng.random_range(1..=4u32);
    let max_pages = if rng.random_bool(0.4) {
        None
    } else {
        Some(pages + rng.random_range(0..=200u32))
    };
    let globals = 2u32;
    let spins = rng.random_ratio(1, 20);
    let mut g = Gen {
        rng,
        helpers,
        table_len,
        pages,
        globals,
        spins,
        calls: true,
        x: None,
        ftmp: 0,
    };

    let (types, imports) = signatures();
    let (functions, tables, memories) = layout(helpers, others, table_len, pages, max_pages);

    let mut global_section = GlobalSection::new();
    for _ in 0..globals {
        let init = g.i64_value();
        global_section.global(
            GlobalType {
                val_type: ValType::I64,
                mutable: true,
                shared: false,
            },
            &ConstExpr::i64_const(init),
        );
    }

    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("_start", ExportKind::Func, F_START);

    // The table: some slots hold helpers or the mismatching function, the
    // rest stay null.
    let filled = g.rng.random_range(0..=table_len);
    let slots: Vec<u32> = (0..filled)
        .map(|_| {
            g.rng
                .random_range(FIRST_HELPER..FIRST_HELPER + helpers + others)
        })
        .collect();
    let mut elements = ElementSection::new();
    elements.active(
        Some(0),
        &ConstExpr::i32_const(0),
        Elements::Functions(slots.into()),
    );

    let mut code = CodeSection::new();
    code.function(&g.start());
    for _ in 0..helpers {
        code.function(&g.helper());
    }
    for _ in 0..others {
        let mut f = Function::new([]);
        let k = g.rng.random::<i32>() | 1;
        f.instructions().local_get(0).i32_const(k).i32_mul().end();
        code.function(&f);
    }

    let mut data = DataSection::new();
    let initial: Vec<u8> = (0..64).map(|_| g.rng.random()).collect();
    data.active(0, &ConstExpr::i32_const(DATA as i32), initial);
    let passive: Vec<u8> = (0..PASSIVE_LEN).map(|_| g.rng.random()).collect();
    data.passive(passive);

    let stdin_len = g.rng.random_range(0..=64usize);
    let stdin = (0..stdin_len).map(|_| g.rng.random()).collect();

    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&tables)
        .section(&memories)
        .section(&global_section)
        .section(&exports)
        .section(&elements)
        .section(&DataCountSection { count: 2 })
        .section(&code)
        .section(&data);
    Program {
        wasm: module.finish(),
        stdin,
        spins,
    }
}

/// The program's function types and its WASI imports, the same in every
/// program.
fn signatures() -> (TypeSection, ImportSection) {
    let mut types = TypeSection::new();
    types.ty().function(
        [ValType::I32, ValType::I32, ValType::I32, ValType::I32],
        [ValType::I32],
    );
    types.ty().function([ValType::I32], []);
    types.ty().function([], []);
    types
        .ty()
        .function([ValType::I64, ValType::I32], [ValType::I64]);
    types.ty().function([ValType::I32], [ValType::I32]);

    let mut imports = ImportSection::new();
    let wasi = "wasi_snapshot_preview1";
    imports.import(wasi, "fd_write", EntityType::Function(T_IO));
    imports.import(wasi, "fd_read", EntityType::Function(T_IO));
    imports.import(wasi, "proc_exit", EntityType::Function(T_EXIT));
    (types, imports)
}

/// The program's functions (`_start`, `helpers` helpers, `others` of the
/// mismatching type), its table of `table_len` slots and its memory of
/// `pages` pages (at most `max_pages`).
fn layout(
    helpers: u32,
    others: u32,
    table_len: u32,
    pages: u32,
    max_pages: Option<u32>,
) -> (FunctionSection, TableSection, MemorySection) {
    let mut functions = FunctionSection::new();
    functions.function(T_START);
    for _ in 0..helpers {
        functions.function(T_HELPER);
    }
    for _ in 0..others {
        functions.function(T_OTHER);
    }

    let mut tables = TableSection::new();
    tables.table(TableType {
        element_type: RefType::FUNCREF,
        table64: false,
        minimum: u64::from(table_len),
        maximum: Some(u64::from(table_len)),
        shared: false,
    });

    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: u64::from(pages),
        maximum: max_pages.map(u64::from),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    (functions, tables, memories)
}

/// The generator's state while it writes one module.
struct Gen<'r> {
    rng: &'r mut SmallRng,
    helpers: u32,
    table_len: u32,
    pages: u32,
    globals: u32,
    /// Whether `_start` ends in a loop that never stops.
    spins: bool,
    /// Whether expressions may call (off inside helpers, which make
    /// exactly one call each, so a call's cost is linear in its depth).
    calls: bool,
    /// The local holding the helper's `x`, inside helpers.
    x: Option<u32>,
    /// The `f64` scratch local.
    ftmp: u32,
}

// Locals of `_start`: the accumulator, the f64 scratch, the loop counter,
// the address a bulk operation wrote at.
const ACC: u32 = 0;
const START_FTMP: u32 = 1;
const COUNTER: u32 = 2;
const ADDR: u32 = 3;
// Locals of helpers: x, depth (parameters), the f64 scratch.
const X: u32 = 0;
const DEPTH: u32 = 1;
const HELPER_FTMP: u32 = 2;

fn mem(offset: u64, align: u32) -> MemArg {
    MemArg {
        offset,
        align,
        memory_index: 0,
    }
}

impl Gen<'_> {
    fn i64_value(&mut self) -> i64 {
        const EDGES: [i64; 10] = [
            0,
            1,
            -1,
            2,
            i64::MIN,
            i64::MAX,
            i32::MIN as i64,
            i32::MAX as i64,
            0x8000_0000,
            63,
        ];
        self.int_value(&EDGES)
    }

    fn i32_value(&mut self) -> i32 {
        const EDGES: [i32; 8] = [0, 1, -1, 2, i32::MIN, i32::MAX, 31, 0x10000];
        self.int_value(&EDGES)
    }

    /// An integer: mostly one of `edges`, else a small one, else any.
    fn int_value<T>(&mut self, edges: &[T]) -> T
    where
        T: Copy + From<i16> + PartialOrd + rand::distr::uniform::SampleUniform,
        rand::distr::StandardUniform: rand::distr::Distribution<T>,
    {
        if self.rng.random_bool(0.6) {
            edges[self.rng.random_range(0..edges.len())]
        } else if self.rng.random_bool(0.5) {
            self.rng.random_range(T::from(-1000)..T::from(1000))
        } else {
            self.rng.random()
        }
    }

    fn f64_value(&mut self) -> f64 {
        const EDGES: [f64; 12] = [
            0.0,
            -0.0,
            1.5,
            -2.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e308,
            9.223_372_036_854_776e18, // 2^63: past i64
            -9.223_372_036_854_776e18,
            4_294_967_296.0, // 2^32: past u32
            0.5,
        ];
        if self.rng.random_bool(0.6) {
            EDGES[self.rng.random_range(0..EDGES.len())]
        } else {
            self.rng.random_range(-1e12..1e12)
        }
    }

    /// An address: mostly inside the initial memory, sometimes at its
    /// very end, sometimes far outside, sometimes computed.
    fn address(&mut self, s: &mut InstructionSink<'_>, width: u32) {
        let size = self.pages * PAGE;
        match self.rng.random_range(0..10) {
            0..=4 => s.i32_const(self.rng.random_range(0..size - 8) as i32),
            5 => s.i32_const((size - self.rng.random_range(0..=width)) as i32),
            6 => s.i32_const(self.rng.random_range(size..size + PAGE) as i32),
            7 => s.i32_const(-(self.rng.random_range(1..16))),
            _ => {
                self.i32_expr(s, 1);
                s.i32_const(0x3_ffff).i32_and()
            }
        };
    }

    fn i64_expr(&mut self, s: &mut InstructionSink<'_>, depth: u32) {
        if depth == 0 || self.rng.random_ratio(1, 4) {
            return self.i64_leaf(s);
        }
        let d = depth - 1;
        match self.rng.random_range(0..24) {
            0..=7 => {
                self.i64_expr(s, d);
                self.i64_expr(s, d);
                self.one_of(s, &i64_binary());
            }
            8 | 9 => {
                self.i64_expr(s, d);
                self.one_of(s, &i64_unary());
            }
            10 => {
                self.i64_expr(s, d);
                self.i64_expr(s, d);
                self.one_of(s, &i64_compare());
                s.i64_extend_i32_u();
            }
            11 => {
                self.i64_expr(s, d);
                self.i64_expr(s, d);
                self.i32_expr(s, d);
                s.select();
            }
            12 => {
                self.i32_expr(s, d);
                s.if_(BlockType::Result(ValType::I64));
                self.i64_expr(s, d);
                s.else_();
                self.i64_expr(s, d);
                s.end();
            }
            13 => {
                self.i32_expr(s, d);
                if self.rng.random_bool(0.5) {
                    s.i64_extend_i32_s()
                } else {
                    s.i64_extend_i32_u()
                };
            }
            14 | 15 => {
                self.f64_expr(s, d);
                match self.rng.random_range(0..5) {
                    0 => s.i64_trunc_f64_s(),
                    1 => s.i64_trunc_f64_u(),
                    2 => s.i64_trunc_sat_f64_s(),
                    3 => s.i64_trunc_sat_f64_u(),
                    _ => {
                        // The f64 is already on the stack: canonicalize it.
                        self.canonical_bits(s);
                        s
                    }
                };
            }
            16..=18 => {
                self.address(s, 8);
                match self.rng.random_range(0..5) {
                    0 | 1 => s.i64_load(mem(0, 3)),
                    2 => s.i64_load8_u(mem(0, 0)),
                    3 => s.i64_load16_s(mem(1, 1)),
                    _ => s.i64_load32_u(mem(0, 2)),
                };
            }
            19 => {
                s.memory_size(0).i64_extend_i32_u();
            }
            20 | 21 if self.calls => {
                self.i64_expr(s, d);
                s.i32_const(self.rng.random_range(0..=8));
                s.call(FIRST_HELPER + self.rng.random_range(0..self.helpers));
            }
            22 | 23 if self.calls => {
                self.i64_expr(s, d);
                s.i32_const(self.rng.random_range(0..=8));
                self.table_index(s);
                s.call_indirect(0, T_HELPER);
            }
            _ => self.i64_leaf(s),
        }
    }

    /// Adds one of `ops`, chosen at random.
    fn one_of<'a>(&mut self, s: &mut InstructionSink<'a>, ops: &[Op<'a>]) {
        ops[self.rng.random_range(0..ops.len())](s);
    }

    fn table_index(&mut self, s: &mut InstructionSink<'_>) {
        s.i32_const(match self.rng.random_range(0..8) {
            0 => -1,
            1 => (self.table_len + self.rng.random_range(0..3)) as i32,
            _ => self.rng.random_range(0..self.table_len) as i32,
        });
    }

    fn i64_leaf(&mut self, s: &mut InstructionSink<'_>) {
        match self.rng.random_range(0..6) {
            0 if self.x.is_some() => s.local_get(X),
            1 if self.globals > 0 => s.global_get(self.rng.random_range(0..self.globals)),
            2 => s
                .i32_const(STDIN + self.rng.random_range(0..STDIN_LEN - 8))
                .i64_load(mem(0, 0)),
            _ => {
                let v = self.i64_value();
                s.i64_const(v)
            }
        };
    }

    fn i32_expr(&mut self, s: &mut InstructionSink<'_>, depth: u32) {
        if depth == 0 || self.rng.random_ratio(1, 3) {
            let v = self.i32_value();
            s.i32_const(v);
            return;
        }
        let d = depth - 1;
        match self.rng.random_range(0..8) {
            0..=2 => {
                self.i32_expr(s, d);
                self.i32_expr(s, d);
                self.one_of(s, &i32_binary());
            }
            3 => {
                self.i64_expr(s, d);
                s.i32_wrap_i64();
            }
            4 => {
                self.i64_expr(s, d);
                self.i64_expr(s, d);
                s.i64_le_s();
            }
            5 => {
                self.address(s, 4);
                if self.rng.random_bool(0.5) {
                    s.i32_load(mem(0, 2))
                } else {
                    s.i32_load8_s(mem(0, 0))
                };
            }
            6 => {
                self.f64_expr(s, d);
                if self.rng.random_bool(0.5) {
                    s.i32_trunc_f64_s()
                } else {
                    s.i32_trunc_sat_f64_u()
                };
            }
            _ => {
                self.i32_expr(s, d);
                s.i32_eqz();
            }
        }
    }

    fn f64_expr(&mut self, s: &mut InstructionSink<'_>, depth: u32) {
        if depth == 0 || self.rng.random_ratio(1, 3) {
            let v = self.f64_value();
            s.f64_const(v.into());
            return;
        }
        let d = depth - 1;
        match self.rng.random_range(0..7) {
            0 | 1 => {
                self.f64_expr(s, d);
                self.f64_expr(s, d);
                self.one_of(s, &f64_binary());
            }
            2 => {
                self.f64_expr(s, d);
                self.one_of(s, &f64_unary());
            }
            3 => {
                self.i64_expr(s, d);
                if self.rng.random_bool(0.5) {
                    s.f64_convert_i64_s()
                } else {
                    s.f64_convert_i64_u()
                };
            }
            4 => {
                self.f64_expr(s, d);
                s.f32_demote_f64().f32_sqrt().f64_promote_f32();
            }
            5 => {
                // The sign comes from a constant, never from a NaN.
                self.f64_expr(s, d);
                let sign = if self.rng.random_bool(0.5) { 1.0 } else { -1.0 };
                s.f64_const(sign.into()).f64_copysign();
            }
            _ => {
                self.i32_expr(s, d);
                s.f64_convert_i32_u();
            }
        }
    }

    /// Replaces the f64 on the stack by its bits, any NaN by the canonical
    /// NaN's.
    fn canonical_bits(&mut self, s: &mut InstructionSink<'_>) {
        s.local_set(self.ftmp)
            .local_get(self.ftmp)
            .i64_reinterpret_f64()
            .i64_const(CANONICAL_NAN)
            .local_get(self.ftmp)
            .local_get(self.ftmp)
            .f64_eq()
            .select();
    }

    /// Writes `len` bytes at [`OUT`] to stdout.
    fn write_out(s: &mut InstructionSink<'_>, len: i32) {
        s.i32_const(IOVEC)
            .i32_const(OUT)
            .i32_store(mem(0, 2))
            .i32_const(IOVEC)
            .i32_const(len)
            .i32_store(mem(4, 2))
            .i32_const(1)
            .i32_const(IOVEC)
            .i32_const(1)
            .i32_const(WRITTEN)
            .call(F_WRITE)
            .drop();
    }

    /// Stores the i64 that `value` leaves and writes it out.
    fn emit(
        &mut self,
        s: &mut InstructionSink<'_>,
        value: impl FnOnce(&mut Self, &mut InstructionSink<'_>),
    ) {
        s.i32_const(OUT);
        value(self, s);
        s.i64_store(mem(0, 3));
        Self::write_out(s, 8);
    }

    fn start(&mut self) -> Function {
        self.calls = true;
        self.x = None;
        self.ftmp = START_FTMP;
        let mut f = Function::new([(1, ValType::I64), (1, ValType::F64), (2, ValType::I32)]);
        let mut s = f.instructions();
        // Read stdin: fd_read(0, iovec {STDIN, STDIN_LEN}, 1, WRITTEN).
        s.i32_const(IOVEC)
            .i32_const(STDIN)
            .i32_store(mem(0, 2))
            .i32_const(IOVEC)
            .i32_const(STDIN_LEN)
            .i32_store(mem(4, 2))
            .i32_const(0)
            .i32_const(IOVEC)
            .i32_const(1)
            .i32_const(WRITTEN)
            .call(F_READ)
            .drop();
        // A program that spins does little before: most statements can
        // trap, and one that traps never reaches the loop.
        let statements = if self.spins {
            self.rng.random_range(0..=2)
        } else {
            self.rng.random_range(1..=24)
        };
        for _ in 0..statements {
            self.statement(&mut s);
        }
        if self.spins {
            s.loop_(BlockType::Empty);
            self.address(&mut s, 8);
            s.local_get(ACC).i64_store(mem(0, 0));
            s.local_get(ACC).i64_const(1).i64_add().local_set(ACC);
            s.br(0).end();
        }
        s.end();
        f
    }

    fn statement(&mut self, s: &mut InstructionSink<'_>) {
        let depth = self.rng.random_range(1..=5);
        match self.rng.random_range(0..100) {
            0..=29 => self.emit(s, |g, s| g.i64_expr(s, depth)),
            30..=39 => self.emit(s, |g, s| {
                g.f64_expr(s, depth);
                g.canonical_bits(s);
            }),
            40..=54 => {
                let width = [8, 4, 1, 2, 4][self.rng.random_range(0..5)];
                self.address(s, width);
                self.i64_expr(s, depth);
                match width {
                    8 => s.i64_store(mem(0, 3)),
                    1 => s.i64_store8(mem(0, 0)),
                    2 => s.i64_store16(mem(0, 1)),
                    _ if self.rng.random_bool(0.5) => s.i64_store32(mem(0, 2)),
                    _ => s.i32_wrap_i64().i32_store(mem(0, 2)),
                };
            }
            55..=60 => {
                const GROWTH: [i32; 10] = [0, 1, 2, 7, 64, 124, 130, 65535, 65536, -1];
                let pages = GROWTH[self.rng.random_range(0..GROWTH.len())];
                self.emit(s, |_, s| {
                    s.i32_const(pages).memory_grow(0).i64_extend_i32_s();
                });
            }
            61..=65 => {
                self.address(s, 8);
                s.local_tee(ADDR);
                self.i32_expr(s, 1);
                self.length(s);
                s.memory_fill(0);
                self.emit(s, |_, s| {
                    s.local_get(ADDR).i64_load(mem(0, 0));
                });
            }
            66..=70 => {
                self.address(s, 8);
                s.local_tee(ADDR);
                self.address(s, 8);
                self.length(s);
                s.memory_copy(0, 0);
                self.emit(s, |_, s| {
                    s.local_get(ADDR).i64_load(mem(0, 0));
                });
            }
            71..=73 => {
                self.address(s, 8);
                s.local_tee(ADDR);
                s.i32_const(self.rng.random_range(0..=PASSIVE_LEN as i32 + 8));
                s.i32_const(self.rng.random_range(0..=PASSIVE_LEN as i32 + 8));
                s.memory_init(0, 1);
                self.emit(s, |_, s| {
                    s.local_get(ADDR).i64_load(mem(0, 0));
                });
            }
            74 => {
                s.data_drop(1);
            }
            75..=82 => {
                // acc = acc * 31 + expr, n times.
                let n = self.rng.random_range(0..=2000);
                s.i32_const(n).local_set(COUNTER);
                s.block(BlockType::Empty).loop_(BlockType::Empty);
                s.local_get(COUNTER).i32_eqz().br_if(1);
                s.local_get(ACC).i64_const(31).i64_mul();
                self.i64_expr(s, depth.min(3));
                s.i64_add().local_set(ACC);
                s.local_get(COUNTER)
                    .i32_const(1)
                    .i32_sub()
                    .local_set(COUNTER);
                s.br(0).end().end();
                self.emit(s, |_, s| {
                    s.local_get(ACC);
                });
            }
            83..=87 => {
                self.i64_expr(s, depth);
                s.global_set(self.rng.random_range(0..self.globals));
            }
            88 | 89 => {
                // Recursion past any engine's stack.
                self.emit(s, |g, s| {
                    g.i64_expr(s, 1);
                    s.i32_const(10_000_000);
                    s.call(FIRST_HELPER + g.rng.random_range(0..g.helpers));
                });
            }
            90 => {
                s.unreachable();
            }
            91 | 92 => {
                const STATUS: [i32; 9] = [0, 1, 2, 42, 125, 126, 255, 256, -1];
                let status = STATUS[self.rng.random_range(0..STATUS.len())];
                s.i32_const(status).call(F_EXIT);
            }
            _ => self.emit(s, |g, s| {
                g.i32_expr(s, depth);
                s.i64_extend_i32_u();
            }),
        }
    }

    /// A bulk-memory length: mostly small, sometimes a page or all of
    /// memory and more.
    fn length(&mut self, s: &mut InstructionSink<'_>) {
        const LENGTHS: [i32; 8] = [0, 1, 7, 64, 4096, 65536, 0x40_0000, -1];
        s.i32_const(LENGTHS[self.rng.random_range(0..LENGTHS.len())]);
    }

    fn helper(&mut self) -> Function {
        self.calls = false;
        self.x = Some(X);
        self.ftmp = HELPER_FTMP;
        let mut f = Function::new([(1, ValType::F64)]);
        let mut s = f.instructions();
        let depth = self.rng.random_range(1..=4);
        s.local_get(DEPTH).i32_const(0).i32_le_s();
        s.if_(BlockType::Result(ValType::I64));
        self.i64_expr(&mut s, depth);
        s.else_();
        // Exactly one call, one level down.
        self.i64_expr(&mut s, depth);
        s.local_get(DEPTH).i32_const(1).i32_sub();
        if self.rng.random_ratio(1, 4) {
            self.table_index(&mut s);
            s.call_indirect(0, T_HELPER);
        } else {
            s.call(FIRST_HELPER + self.rng.random_range(0..self.helpers));
        }
        self.i64_expr(&mut s, depth.min(2));
        self.one_of(
            &mut s,
            &[
                InstructionSink::i64_add,
                InstructionSink::i64_xor,
                InstructionSink::i64_mul,
            ],
        );
        s.end();
        s.end();
        f
    }
}
