//! Datatypes as pure data: predefined basic types, the MINLOC/MAXLOC pair
//! types, and derived types flattened into a type map of blocks.
//!
//! Contract (see docs/CONTRACTS.md §2):
//! - A `TypeDesc` is immutable once built. Derived constructors take their
//!   children as `&Arc<TypeDesc>` and keep those `Arc`s in the `Combiner`, so
//!   `MPI_Type_get_contents` can hand out new handles to the very same child
//!   descriptions. A child that is predefined has `Combiner::Named`.
//! - The type map is flattened: `blocks()` lists `(disp, basic, count)` runs in
//!   type-map order (the order data is packed in); consecutive runs of the same
//!   basic type that touch in memory are merged.
//! - The packed stream of `count` elements is the data of each block in order,
//!   element after element, in native representation with no padding. The
//!   stream may be cut at any byte (`pack_range`/`unpack_range`).
//! - Bounds follow the standard: a type built with `resized` carries explicit
//!   lb/ub markers; markers win over data in every type built from it. A
//!   struct without markers has its extent rounded up to the largest alignment
//!   of its basic types (the C rule, as MPICH and Open MPI do).
//! - `subarray` and `darray` build their map from hindexed/resized steps but
//!   keep their own combiner; both have lb 0 and the extent of the global array.
//! - Large counts: constructors take `i64` counts (negative ones are errors:
//!   MPI_ERR_COUNT for counts, MPI_ERR_ARG for block lengths). A type made by
//!   an `_c` function is marked with `with_large_counts()`, which only changes
//!   where `contents()` reports the arguments.
//! - Target is x86-64 Linux (LP64): `long` is 8 bytes, `long double` is the
//!   80-bit x87 format in 16 bytes of storage, `wchar_t` is 4 bytes.
//! - `count_of` / `elements_of` answer MPI_Get_count / MPI_Get_elements;
//!   `for_each_piece` walks the memory pieces of a stream window (iovecs);
//!   `pack_external` / `unpack_external` speak external32 (see `external32.rs`).
//! - Files: this one (types, constructors, queries), `pack.rs` (native
//!   packing by byte window), `external32.rs`, `tests.rs`, `bench.rs`.
//!
//! Limitation: the map is fully flattened, so a type whose data is in many
//! separate pieces costs about 48 bytes per piece (block, packed offset, run)
//! and at most `MAX_BLOCKS` pieces are allowed (MPI_ERR_NO_MEM beyond).
//! Repetitions that merge into one run (contiguous of a dense type, vectors
//! whose stride equals the block) cost one piece whatever the count. Packing
//! `count` elements never replicates the map.

use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::sync::Arc;

/// Kind of a basic type, for the op/type table of reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeClass {
    /// C integer and Fortran integer types (incl. MPI_AINT, MPI_OFFSET, MPI_COUNT).
    Integer,
    /// C and Fortran floating point types.
    Floating,
    /// C `_Bool` and Fortran LOGICAL.
    Logical,
    /// C and Fortran complex types.
    Complex,
    /// MPI_BYTE.
    Byte,
    /// MPI_CHAR, MPI_WCHAR, MPI_CHARACTER: no arithmetic.
    Character,
    /// MPI_PACKED.
    Packed,
}

macro_rules! basics {
    ($( $v:ident = $name:literal, $size:literal, $align:literal, $class:ident; )*) => {
        /// Every predefined basic (non-pair) MPI datatype.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Basic { $( $v, )* }

        impl Basic {
            /// All basic types, in declaration order.
            pub const ALL: &'static [Basic] = &[ $( Basic::$v, )* ];

            /// Bytes of storage of one value (also its packed size).
            pub const fn size(self) -> usize {
                match self { $( Basic::$v => $size, )* }
            }
            /// C alignment of the type on x86-64.
            pub const fn align(self) -> usize {
                match self { $( Basic::$v => $align, )* }
            }
            /// The class used by the op/type table.
            pub const fn class(self) -> TypeClass {
                match self { $( Basic::$v => TypeClass::$class, )* }
            }
            /// The MPI name, e.g. "MPI_INT".
            pub const fn name(self) -> &'static str {
                match self { $( Basic::$v => $name, )* }
            }
        }
    };
}

basics! {
    Char = "MPI_CHAR", 1, 1, Character;
    SignedChar = "MPI_SIGNED_CHAR", 1, 1, Integer;
    UnsignedChar = "MPI_UNSIGNED_CHAR", 1, 1, Integer;
    Short = "MPI_SHORT", 2, 2, Integer;
    UnsignedShort = "MPI_UNSIGNED_SHORT", 2, 2, Integer;
    Int = "MPI_INT", 4, 4, Integer;
    Unsigned = "MPI_UNSIGNED", 4, 4, Integer;
    Long = "MPI_LONG", 8, 8, Integer;
    UnsignedLong = "MPI_UNSIGNED_LONG", 8, 8, Integer;
    LongLong = "MPI_LONG_LONG", 8, 8, Integer;
    UnsignedLongLong = "MPI_UNSIGNED_LONG_LONG", 8, 8, Integer;
    Int8 = "MPI_INT8_T", 1, 1, Integer;
    Int16 = "MPI_INT16_T", 2, 2, Integer;
    Int32 = "MPI_INT32_T", 4, 4, Integer;
    Int64 = "MPI_INT64_T", 8, 8, Integer;
    Uint8 = "MPI_UINT8_T", 1, 1, Integer;
    Uint16 = "MPI_UINT16_T", 2, 2, Integer;
    Uint32 = "MPI_UINT32_T", 4, 4, Integer;
    Uint64 = "MPI_UINT64_T", 8, 8, Integer;
    Float = "MPI_FLOAT", 4, 4, Floating;
    // gpumpi extensions (mpi-ext.h): IEEE binary16 and bfloat16, reduced through f32.
    Float16 = "MPIX_C_FLOAT16", 2, 2, Floating;
    Bfloat16 = "MPIX_BFLOAT16", 2, 2, Floating;
    Double = "MPI_DOUBLE", 8, 8, Floating;
    LongDouble = "MPI_LONG_DOUBLE", 16, 16, Floating;
    CBool = "MPI_C_BOOL", 1, 1, Logical;
    WChar = "MPI_WCHAR", 4, 4, Character;
    FloatComplex = "MPI_C_FLOAT_COMPLEX", 8, 4, Complex;
    DoubleComplex = "MPI_C_DOUBLE_COMPLEX", 16, 8, Complex;
    LongDoubleComplex = "MPI_C_LONG_DOUBLE_COMPLEX", 32, 16, Complex;
    Byte = "MPI_BYTE", 1, 1, Byte;
    Packed = "MPI_PACKED", 1, 1, Packed;
    Aint = "MPI_AINT", 8, 8, Integer;
    Offset = "MPI_OFFSET", 8, 8, Integer;
    Count = "MPI_COUNT", 8, 8, Integer;
    // Fortran types with the usual gfortran sizes (default INTEGER/REAL/LOGICAL of 4 bytes).
    FInteger = "MPI_INTEGER", 4, 4, Integer;
    FInteger1 = "MPI_INTEGER1", 1, 1, Integer;
    FInteger2 = "MPI_INTEGER2", 2, 2, Integer;
    FInteger4 = "MPI_INTEGER4", 4, 4, Integer;
    FInteger8 = "MPI_INTEGER8", 8, 8, Integer;
    FReal = "MPI_REAL", 4, 4, Floating;
    FDoublePrecision = "MPI_DOUBLE_PRECISION", 8, 8, Floating;
    FReal4 = "MPI_REAL4", 4, 4, Floating;
    FReal8 = "MPI_REAL8", 8, 8, Floating;
    FLogical = "MPI_LOGICAL", 4, 4, Logical;
    FComplex = "MPI_COMPLEX", 8, 4, Complex;
    FDoubleComplex = "MPI_DOUBLE_COMPLEX", 16, 8, Complex;
    FComplex8 = "MPI_COMPLEX8", 8, 4, Complex;
    FComplex16 = "MPI_COMPLEX16", 16, 8, Complex;
    FCharacter = "MPI_CHARACTER", 1, 1, Character;
}

/// The unit a reduction works on: one basic value, or a (value, index) pair
/// for MINLOC/MAXLOC.
///
/// In memory (the user's buffer) a pair has C struct layout with padding
/// (`extent()`); in the packed stream, which is what `op::reduce` works on,
/// it is the value followed directly by the index (`size()` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Basic(Basic),
    /// (value type, index type)
    Pair(Basic, Basic),
}

impl Elem {
    pub const FLOAT_INT: Elem = Elem::Pair(Basic::Float, Basic::Int);
    pub const DOUBLE_INT: Elem = Elem::Pair(Basic::Double, Basic::Int);
    pub const LONG_INT: Elem = Elem::Pair(Basic::Long, Basic::Int);
    pub const TWO_INT: Elem = Elem::Pair(Basic::Int, Basic::Int);
    pub const SHORT_INT: Elem = Elem::Pair(Basic::Short, Basic::Int);
    pub const LONG_DOUBLE_INT: Elem = Elem::Pair(Basic::LongDouble, Basic::Int);
    pub const TWO_INTEGER: Elem = Elem::Pair(Basic::FInteger, Basic::FInteger);
    pub const TWO_REAL: Elem = Elem::Pair(Basic::FReal, Basic::FReal);
    pub const TWO_DOUBLE_PRECISION: Elem =
        Elem::Pair(Basic::FDoublePrecision, Basic::FDoublePrecision);

    /// The predefined pair types.
    pub const PAIRS: &'static [Elem] = &[
        Elem::FLOAT_INT,
        Elem::DOUBLE_INT,
        Elem::LONG_INT,
        Elem::TWO_INT,
        Elem::SHORT_INT,
        Elem::LONG_DOUBLE_INT,
        Elem::TWO_INTEGER,
        Elem::TWO_REAL,
        Elem::TWO_DOUBLE_PRECISION,
    ];

    /// Bytes of data (packed size): value + index, no padding.
    pub const fn size(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(v, i) => v.size() + i.size(),
        }
    }
    /// Alignment of the C struct.
    pub const fn align(self) -> usize {
        match self {
            Elem::Basic(b) => b.align(),
            Elem::Pair(v, i) => {
                if v.align() > i.align() {
                    v.align()
                } else {
                    i.align()
                }
            }
        }
    }
    /// Offset of the index inside the C struct `{ value; index; }`.
    pub const fn index_offset(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(v, i) => round_up(v.size(), i.align()),
        }
    }
    /// Extent of the C struct (with trailing padding), e.g. 16 for MPI_DOUBLE_INT.
    pub const fn extent(self) -> usize {
        match self {
            Elem::Basic(b) => b.size(),
            Elem::Pair(_, i) => round_up(self.index_offset() + i.size(), self.align()),
        }
    }
    /// The predefined type of an MPI name, aliases included ("MPI_LONG_LONG_INT",
    /// "MPI_C_COMPLEX", "MPI_CXX_BOOL", ...), so the ABI layer can build its
    /// handle table from the generated constants by name. None for names
    /// gpumpi does not support.
    pub fn from_name(name: &str) -> Option<Elem> {
        if let Some(b) = Basic::ALL.iter().find(|b| b.name() == name) {
            return Some(Elem::Basic(*b));
        }
        if let Some(p) = Elem::PAIRS.iter().find(|p| p.name() == name) {
            return Some(*p);
        }
        let b = match name {
            "MPI_LONG_LONG_INT" => Basic::LongLong,
            "MPI_C_COMPLEX" | "MPI_CXX_FLOAT_COMPLEX" => Basic::FloatComplex,
            "MPI_CXX_DOUBLE_COMPLEX" => Basic::DoubleComplex,
            "MPI_CXX_LONG_DOUBLE_COMPLEX" => Basic::LongDoubleComplex,
            "MPI_CXX_BOOL" => Basic::CBool,
            _ => return None,
        };
        Some(Elem::Basic(b))
    }

    pub const fn name(self) -> &'static str {
        match self {
            Elem::Basic(b) => b.name(),
            Elem::Pair(Basic::Float, Basic::Int) => "MPI_FLOAT_INT",
            Elem::Pair(Basic::Double, Basic::Int) => "MPI_DOUBLE_INT",
            Elem::Pair(Basic::Long, Basic::Int) => "MPI_LONG_INT",
            Elem::Pair(Basic::Int, Basic::Int) => "MPI_2INT",
            Elem::Pair(Basic::Short, Basic::Int) => "MPI_SHORT_INT",
            Elem::Pair(Basic::LongDouble, Basic::Int) => "MPI_LONG_DOUBLE_INT",
            Elem::Pair(Basic::FInteger, Basic::FInteger) => "MPI_2INTEGER",
            Elem::Pair(Basic::FReal, Basic::FReal) => "MPI_2REAL",
            Elem::Pair(Basic::FDoublePrecision, Basic::FDoublePrecision) => "MPI_2DOUBLE_PRECISION",
            Elem::Pair(..) => "(pair type)",
        }
    }
}

const fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// One run of `count` consecutive values of `basic` at byte displacement `disp`
/// (relative to the buffer address of the element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub disp: isize,
    pub basic: Basic,
    pub count: usize,
}

impl Block {
    pub fn bytes(&self) -> usize {
        self.count * self.basic.size()
    }
}

/// Array storage order of `subarray`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    C,
    Fortran,
}

/// How a type was made, with the constructor's arguments as given
/// (for `MPI_Type_get_envelope` / `MPI_Type_get_contents`).
#[derive(Clone, Debug)]
pub enum Combiner {
    /// A predefined type (basic or pair).
    Named(Elem),
    Dup(Arc<TypeDesc>),
    Contiguous {
        count: i64,
        old: Arc<TypeDesc>,
    },
    Vector {
        count: i64,
        blocklen: i64,
        stride: i64,
        old: Arc<TypeDesc>,
    },
    /// `stride` in bytes.
    Hvector {
        count: i64,
        blocklen: i64,
        stride: isize,
        old: Arc<TypeDesc>,
    },
    Indexed {
        blocklens: Vec<i64>,
        disps: Vec<i64>,
        old: Arc<TypeDesc>,
    },
    Hindexed {
        blocklens: Vec<i64>,
        disps: Vec<isize>,
        old: Arc<TypeDesc>,
    },
    IndexedBlock {
        blocklen: i64,
        disps: Vec<i64>,
        old: Arc<TypeDesc>,
    },
    HindexedBlock {
        blocklen: i64,
        disps: Vec<isize>,
        old: Arc<TypeDesc>,
    },
    Struct {
        blocklens: Vec<i64>,
        disps: Vec<isize>,
        types: Vec<Arc<TypeDesc>>,
    },
    Subarray {
        sizes: Vec<i64>,
        subsizes: Vec<i64>,
        starts: Vec<i64>,
        order: Order,
        old: Arc<TypeDesc>,
    },
    Darray {
        size: i64,
        rank: i64,
        gsizes: Vec<i64>,
        distribs: Vec<Distrib>,
        /// `None` = `MPI_DISTRIBUTE_DFLT_DARG`.
        dargs: Vec<Option<i64>>,
        psizes: Vec<i64>,
        order: Order,
        old: Arc<TypeDesc>,
    },
    Resized {
        lb: isize,
        extent: isize,
        old: Arc<TypeDesc>,
    },
    /// `MPI_Type_create_f90_{integer,real,complex}`: the predefined type `old` chosen for
    /// (precision `p`, decimal exponent range `r`); `p` is None for integers.
    F90 {
        class: F90Class,
        p: Option<i64>,
        r: i64,
        old: Arc<TypeDesc>,
    },
}

/// The Fortran type class of an `MPI_Type_create_f90_*` type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F90Class {
    Integer,
    Real,
    Complex,
}

/// Distribution of one dimension of `darray`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distrib {
    Block,
    Cyclic,
    None,
}

/// The combiner kind, for `MPI_Type_get_envelope` (the ABI layer maps it to
/// the `MPI_COMBINER_*` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CombinerKind {
    Named,
    Dup,
    Contiguous,
    Vector,
    Hvector,
    Indexed,
    Hindexed,
    IndexedBlock,
    HindexedBlock,
    Struct,
    Subarray,
    Darray,
    Resized,
    F90(F90Class),
}

/// Arguments of a constructor in the layout of `MPI_Type_get_contents`:
/// integers, addresses, large counts, datatypes. A type marked with
/// `with_large_counts` (made by an `_c` constructor) has its counts and
/// displacements in `large` as the standard's large-count table says.
///
/// Enumerated values are encoded here and must be mapped to the ABI's
/// constants by the ABI layer: order 0 = C, 1 = Fortran; distribution
/// 0 = BLOCK, 1 = CYCLIC, 2 = NONE; darg -1 = `MPI_DISTRIBUTE_DFLT_DARG`.
#[derive(Clone, Debug, Default)]
pub struct Contents {
    pub ints: Vec<i64>,
    pub addrs: Vec<isize>,
    pub large: Vec<i64>,
    pub types: Vec<Arc<TypeDesc>>,
}

/// A datatype: flattened type map plus bounds and the combiner.
#[derive(Clone, Debug)]
pub struct TypeDesc {
    /// Shared, so `dup` and `resized` do not copy large maps.
    blocks: Arc<[Block]>,
    /// Packed offset of each block inside one element (same length as `blocks`).
    offs: Arc<[usize]>,
    /// (displacement, bytes) of each block: what packing walks.
    runs: Arc<[(isize, usize)]>,
    /// The byte length shared by all runs, or 0.
    uniform: usize,
    /// Every block starts where the previous one ends (one run in memory,
    /// possibly of several basic types, e.g. MPI_FLOAT_INT).
    adjacent: bool,
    lb: isize,
    ub: isize,
    true_lb: isize,
    true_ub: isize,
    size: usize,
    align: usize,
    lb_marker: bool,
    ub_marker: bool,
    elem: Option<Elem>,
    combiner: Combiner,
    /// Made by a large-count (`_c`) constructor: changes `contents()`.
    large: bool,
}

/// Most separate pieces a flattened type map may hold (24 bytes each).
pub const MAX_BLOCKS: usize = 1 << 26;

fn check_count(what: &str, n: i64) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_COUNT, "{} {} is negative", what, n);
    }
    match usize::try_from(n) {
        Ok(v) => Ok(v),
        Err(_) => mpi_bail!(MPI_ERR_COUNT, "{} {} is too large", what, n),
    }
}

fn check_blocklen(n: i64) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_ARG, "block length {} is negative", n);
    }
    Ok(n as usize)
}

fn mul_disp(a: i64, b: isize) -> MpiResult<isize> {
    match isize::try_from(a).ok().and_then(|a| a.checked_mul(b)) {
        Some(v) => Ok(v),
        None => mpi_bail!(MPI_ERR_ARG, "displacement {} * {} overflows", a, b),
    }
}

/// Accumulates the type map and bounds of a derived type.
struct Builder {
    blocks: Vec<Block>,
    size: usize,
    align: usize,
    // (marked min, unmarked min) for lb, (marked max, unmarked max) for ub
    lb_m: Option<isize>,
    lb_u: Option<isize>,
    ub_m: Option<isize>,
    ub_u: Option<isize>,
    true_lb: Option<isize>,
    true_ub: Option<isize>,
    /// Common elem of the children with data. None = no child yet; Some(None) = children disagree.
    elem: Option<Option<Elem>>,
    /// The same over children without data (used when no child has data, so
    /// that `contiguous(0, MPI_INT)` still reports MPI_INT).
    empty_elem: Option<Option<Elem>>,
}

fn merge_elem(acc: Option<Option<Elem>>, e: Option<Elem>) -> Option<Option<Elem>> {
    Some(match acc {
        None => e,
        Some(a) if a == e => a,
        Some(_) => None,
    })
}

fn min_opt(a: Option<isize>, b: isize) -> Option<isize> {
    Some(a.map_or(b, |a| a.min(b)))
}
fn max_opt(a: Option<isize>, b: isize) -> Option<isize> {
    Some(a.map_or(b, |a| a.max(b)))
}

impl Builder {
    fn new() -> Self {
        Builder {
            blocks: Vec::new(),
            size: 0,
            align: 1,
            lb_m: None,
            lb_u: None,
            ub_m: None,
            ub_u: None,
            true_lb: None,
            true_ub: None,
            elem: None,
            empty_elem: None,
        }
    }

    fn push_block(&mut self, b: Block) {
        if b.count == 0 {
            return;
        }
        if let Some(last) = self.blocks.last_mut() {
            if last.basic == b.basic && last.disp + last.bytes() as isize == b.disp {
                last.count += b.count;
                return;
            }
        }
        self.blocks.push(b);
    }

    /// `reps` copies of `child`, the k-th at byte displacement `disp + k * child.extent()`.
    fn push(&mut self, disp: isize, reps: usize, child: &TypeDesc) -> MpiResult<()> {
        if reps == 0 || child.size == 0 {
            self.empty_elem = merge_elem(self.empty_elem, child.elem);
        }
        if reps == 0 {
            return Ok(());
        }
        let ext = child.extent();
        let last = match isize::try_from(reps - 1)
            .ok()
            .and_then(|r| r.checked_mul(ext))
        {
            Some(v) => disp.checked_add(v),
            None => None,
        };
        let Some(last) = last else {
            mpi_bail!(MPI_ERR_ARG, "type map displacement overflows");
        };
        let has_data = !child.blocks.is_empty();
        if !has_data && !child.lb_marker && !child.ub_marker {
            return Ok(());
        }
        let (lo, hi) = (disp.min(last), disp.max(last));
        if child.lb_marker {
            self.lb_m = min_opt(self.lb_m, lo + child.lb);
        } else {
            self.lb_u = min_opt(self.lb_u, lo + child.lb);
        }
        if child.ub_marker {
            self.ub_m = max_opt(self.ub_m, hi + child.ub);
        } else {
            self.ub_u = max_opt(self.ub_u, hi + child.ub);
        }
        if has_data {
            self.true_lb = min_opt(self.true_lb, lo + child.true_lb);
            self.true_ub = max_opt(self.true_ub, hi + child.true_ub);
        }
        self.align = self.align.max(child.align);
        let Some(size) = reps
            .checked_mul(child.size)
            .and_then(|s| s.checked_add(self.size))
        else {
            mpi_bail!(MPI_ERR_ARG, "type size overflows");
        };
        self.size = size;
        if has_data {
            self.elem = merge_elem(self.elem, child.elem);
        }
        if child.is_dense() {
            // One run: `reps` copies side by side are a single longer block.
            let b = child.blocks[0];
            self.push_block(Block {
                disp: disp + b.disp,
                basic: b.basic,
                count: b.count * reps,
            });
            return Ok(());
        }
        let pieces = reps.saturating_mul(child.blocks.len());
        if pieces > MAX_BLOCKS || self.blocks.len() + pieces > MAX_BLOCKS {
            mpi_bail!(
                MPI_ERR_NO_MEM,
                "type map of more than {} separate pieces (gpumpi flattens type maps)",
                MAX_BLOCKS
            );
        }
        self.blocks.reserve(pieces.min(1 << 20));
        for k in 0..reps {
            let base = disp + k as isize * ext;
            for b in child.blocks.iter() {
                self.push_block(Block {
                    disp: base + b.disp,
                    ..*b
                });
            }
        }
        Ok(())
    }

    fn finish(self, combiner: Combiner, pad_struct: bool) -> TypeDesc {
        let lb_marker = self.lb_m.is_some();
        let ub_marker = self.ub_m.is_some();
        let lb = self.lb_m.or(self.lb_u).unwrap_or(0);
        let mut ub = self.ub_m.or(self.ub_u).unwrap_or(0);
        if pad_struct && !lb_marker && !ub_marker {
            let ext = ub - lb;
            let a = self.align as isize;
            if ext.rem_euclid(a) != 0 {
                ub += a - ext.rem_euclid(a);
            }
        }
        // Elem: the children's common elem, or the one basic type of all blocks.
        let mut elem = match self.elem {
            Some(e) => e,
            None => self.empty_elem.flatten(),
        };
        if elem.is_none() {
            if let Some(first) = self.blocks.first() {
                if self.blocks.iter().all(|b| b.basic == first.basic) {
                    elem = Some(Elem::Basic(first.basic));
                }
            }
        }
        TypeDesc::from_parts(
            self.blocks,
            lb,
            ub,
            self.true_lb.unwrap_or(0),
            self.true_ub.unwrap_or(0),
            self.align,
            lb_marker,
            ub_marker,
            elem,
            combiner,
        )
    }
}

impl TypeDesc {
    #[allow(clippy::too_many_arguments)]
    fn from_parts(
        blocks: Vec<Block>,
        lb: isize,
        ub: isize,
        true_lb: isize,
        true_ub: isize,
        align: usize,
        lb_marker: bool,
        ub_marker: bool,
        elem: Option<Elem>,
        combiner: Combiner,
    ) -> TypeDesc {
        let mut offs = Vec::with_capacity(blocks.len());
        let mut size = 0usize;
        for b in &blocks {
            offs.push(size);
            size += b.bytes();
        }
        let runs: Vec<(isize, usize)> = blocks.iter().map(|b| (b.disp, b.bytes())).collect();
        let uniform = match runs.first() {
            Some(&(_, n)) if runs.iter().all(|r| r.1 == n) => n,
            _ => 0,
        };
        let adjacent = runs.windows(2).all(|w| w[0].0 + w[0].1 as isize == w[1].0);
        TypeDesc {
            blocks: blocks.into(),
            offs: offs.into(),
            runs: runs.into(),
            uniform,
            adjacent,
            lb,
            ub,
            true_lb,
            true_ub,
            size,
            align,
            lb_marker,
            ub_marker,
            elem,
            combiner,
            large: false,
        }
    }

    // ---------------------------------------------------------------- constructors

    /// A predefined basic type.
    pub fn predefined(b: Basic) -> TypeDesc {
        let sz = b.size() as isize;
        TypeDesc::from_parts(
            vec![Block {
                disp: 0,
                basic: b,
                count: 1,
            }],
            0,
            sz,
            0,
            sz,
            b.align(),
            false,
            false,
            Some(Elem::Basic(b)),
            Combiner::Named(Elem::Basic(b)),
        )
    }

    /// A predefined type (basic or pair); the same as `pair`.
    pub fn named(e: Elem) -> TypeDesc {
        Self::pair(e)
    }

    /// A predefined type given as an `Elem`: a basic type or a pair type
    /// (MPI_DOUBLE_INT, ...) with its C struct layout.
    pub fn pair(e: Elem) -> TypeDesc {
        match e {
            Elem::Basic(b) => TypeDesc::predefined(b),
            Elem::Pair(v, i) => {
                let ioff = e.index_offset() as isize;
                let mut blocks = vec![Block {
                    disp: 0,
                    basic: v,
                    count: 1,
                }];
                if v == i && ioff == v.size() as isize {
                    blocks[0].count = 2;
                } else {
                    blocks.push(Block {
                        disp: ioff,
                        basic: i,
                        count: 1,
                    });
                }
                TypeDesc::from_parts(
                    blocks,
                    0,
                    e.extent() as isize,
                    0,
                    ioff + i.size() as isize,
                    e.align(),
                    false,
                    false,
                    Some(e),
                    Combiner::Named(e),
                )
            }
        }
    }

    pub fn contiguous(count: i64, old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let n = check_count("count", count)?;
        let mut b = Builder::new();
        b.push(0, n, old)?;
        Ok(b.finish(
            Combiner::Contiguous {
                count,
                old: old.clone(),
            },
            false,
        ))
    }

    /// `stride` in multiples of `old`'s extent.
    pub fn vector(
        count: i64,
        blocklen: i64,
        stride: i64,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let stride_bytes = mul_disp(stride, old.extent())?;
        let mut t = Self::hvector_inner(count, blocklen, stride_bytes, old)?;
        t.combiner = Combiner::Vector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Ok(t)
    }

    /// `stride` in bytes.
    pub fn hvector(
        count: i64,
        blocklen: i64,
        stride: isize,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let mut t = Self::hvector_inner(count, blocklen, stride, old)?;
        t.combiner = Combiner::Hvector {
            count,
            blocklen,
            stride,
            old: old.clone(),
        };
        Ok(t)
    }

    fn hvector_inner(
        count: i64,
        blocklen: i64,
        stride: isize,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let n = check_count("count", count)?;
        let bl = check_blocklen(blocklen)?;
        let mut b = Builder::new();
        if old.is_dense()
            && Some(stride)
                == isize::try_from(bl)
                    .ok()
                    .and_then(|bl| bl.checked_mul(old.extent()))
        {
            // Blocks side by side: one run (no per-block loop for huge counts).
            let Some(total) = n.checked_mul(bl) else {
                mpi_bail!(MPI_ERR_COUNT, "count {} * block length {} overflows", n, bl);
            };
            b.push(0, total, old)?;
        } else if bl > 0 && (old.size() > 0 || old.lb_marker || old.ub_marker) {
            let per = if old.is_dense() {
                1
            } else {
                bl.saturating_mul(old.blocks.len())
            };
            if n.saturating_mul(per) > MAX_BLOCKS {
                mpi_bail!(
                    MPI_ERR_NO_MEM,
                    "type map of more than {} separate pieces (gpumpi flattens type maps)",
                    MAX_BLOCKS
                );
            }
            for i in 0..n {
                b.push(mul_disp(i as i64, stride)?, bl, old)?;
            }
        }
        Ok(b.finish(Combiner::Dup(old.clone()), false))
    }

    /// Displacements in multiples of `old`'s extent.
    pub fn indexed(blocklens: &[i64], disps: &[i64], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        let bytes: Vec<isize> = disps
            .iter()
            .map(|&d| mul_disp(d, old.extent()))
            .collect::<MpiResult<_>>()?;
        let mut t = Self::hindexed_inner(blocklens, &bytes, old)?;
        t.combiner = Combiner::Indexed {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes.
    pub fn hindexed(
        blocklens: &[i64],
        disps: &[isize],
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let mut t = Self::hindexed_inner(blocklens, disps, old)?;
        t.combiner = Combiner::Hindexed {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    fn hindexed_inner(
        blocklens: &[i64],
        disps: &[isize],
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        if blocklens.len() != disps.len() {
            mpi_bail!(
                MPI_ERR_ARG,
                "{} block lengths but {} displacements",
                blocklens.len(),
                disps.len()
            );
        }
        let mut b = Builder::new();
        for (&bl, &d) in blocklens.iter().zip(disps) {
            b.push(d, check_blocklen(bl)?, old)?;
        }
        Ok(b.finish(Combiner::Dup(old.clone()), false))
    }

    /// Displacements in multiples of `old`'s extent.
    pub fn indexed_block(blocklen: i64, disps: &[i64], old: &Arc<TypeDesc>) -> MpiResult<TypeDesc> {
        check_blocklen(blocklen)?;
        let bytes: Vec<isize> = disps
            .iter()
            .map(|&d| mul_disp(d, old.extent()))
            .collect::<MpiResult<_>>()?;
        let bls = vec![blocklen; disps.len()];
        let mut t = Self::hindexed_inner(&bls, &bytes, old)?;
        t.combiner = Combiner::IndexedBlock {
            blocklen,
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes.
    pub fn hindexed_block(
        blocklen: i64,
        disps: &[isize],
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        check_blocklen(blocklen)?;
        let bls = vec![blocklen; disps.len()];
        let mut t = Self::hindexed_inner(&bls, disps, old)?;
        t.combiner = Combiner::HindexedBlock {
            blocklen,
            disps: disps.to_vec(),
            old: old.clone(),
        };
        Ok(t)
    }

    /// Displacements in bytes. Without explicit bounds (no `resized` child)
    /// the extent is rounded up to the largest alignment of the members.
    pub fn create_struct(
        blocklens: &[i64],
        disps: &[isize],
        types: &[&Arc<TypeDesc>],
    ) -> MpiResult<TypeDesc> {
        if blocklens.len() != disps.len() || blocklens.len() != types.len() {
            mpi_bail!(
                MPI_ERR_ARG,
                "{} block lengths, {} displacements and {} types",
                blocklens.len(),
                disps.len(),
                types.len()
            );
        }
        let mut b = Builder::new();
        for ((&bl, &d), t) in blocklens.iter().zip(disps).zip(types) {
            b.push(d, check_blocklen(bl)?, t)?;
        }
        let comb = Combiner::Struct {
            blocklens: blocklens.to_vec(),
            disps: disps.to_vec(),
            types: types.iter().map(|t| (*t).clone()).collect(),
        };
        Ok(b.finish(comb, true))
    }

    /// New bounds: lb and extent become explicit markers.
    pub fn resized(old: &Arc<TypeDesc>, lb: isize, extent: isize) -> MpiResult<TypeDesc> {
        let Some(ub) = lb.checked_add(extent) else {
            mpi_bail!(MPI_ERR_ARG, "lb {} + extent {} overflows", lb, extent);
        };
        let mut t = (**old).clone();
        t.lb = lb;
        t.ub = ub;
        t.lb_marker = true;
        t.ub_marker = true;
        t.combiner = Combiner::Resized {
            lb,
            extent,
            old: old.clone(),
        };
        Ok(t)
    }

    /// An `MPI_Type_create_f90_*` type: the layout of the predefined `old`, remembering
    /// the (p, r) it was selected by (its contents; it has no datatype arguments).
    pub fn f90(class: F90Class, p: Option<i64>, r: i64, old: &Arc<TypeDesc>) -> TypeDesc {
        let mut t = (**old).clone();
        t.combiner = Combiner::F90 {
            class,
            p,
            r,
            old: old.clone(),
        };
        t
    }

    pub fn dup(old: &Arc<TypeDesc>) -> TypeDesc {
        let mut t = (**old).clone();
        t.combiner = Combiner::Dup(old.clone());
        t
    }

    /// An `ndims`-dimensional subarray of an array of `sizes` elements of `old`,
    /// `subsizes` elements starting at `starts`. The result has lb 0 and the
    /// extent of the whole array.
    pub fn subarray(
        sizes: &[i64],
        subsizes: &[i64],
        starts: &[i64],
        order: Order,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let nd = sizes.len();
        if nd == 0 {
            mpi_bail!(MPI_ERR_ARG, "subarray needs at least one dimension");
        }
        if subsizes.len() != nd || starts.len() != nd {
            mpi_bail!(
                MPI_ERR_ARG,
                "subarray: sizes, subsizes and starts differ in length"
            );
        }
        for d in 0..nd {
            if sizes[d] < 1 {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: size {} of dimension {} is not positive",
                    sizes[d],
                    d
                );
            }
            if subsizes[d] < 0 || subsizes[d] > sizes[d] {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: subsize {} of dimension {} is not in 0..={}",
                    subsizes[d],
                    d,
                    sizes[d]
                );
            }
            if starts[d] < 0 || starts[d] > sizes[d] - subsizes[d] {
                mpi_bail!(
                    MPI_ERR_ARG,
                    "subarray: start {} of dimension {} is out of range",
                    starts[d],
                    d
                );
            }
        }
        // Dimensions from fastest to slowest varying.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let ext = old.extent();
        let mut t: Arc<TypeDesc> = Arc::new(Self::contiguous(subsizes[dims[0]], old)?);
        let mut stride = mul_disp(sizes[dims[0]], ext)?;
        let mut disp = mul_disp(starts[dims[0]], ext)?;
        for &d in &dims[1..] {
            t = Arc::new(Self::hvector(subsizes[d], 1, stride, &t)?);
            disp += mul_disp(starts[d], stride)?;
            stride = mul_disp(sizes[d], stride)?;
        }
        let t = Arc::new(Self::hindexed(&[1], &[disp], &t)?);
        let mut t = Self::resized(&t, 0, stride)?;
        t.combiner = Combiner::Subarray {
            sizes: sizes.to_vec(),
            subsizes: subsizes.to_vec(),
            starts: starts.to_vec(),
            order,
            old: old.clone(),
        };
        Ok(t)
    }

    /// `MPI_Type_create_darray`: the part of a `gsizes` global array (of
    /// `old`) that process `rank` of a `psizes` process grid (row-major) owns
    /// under the given distributions. `dargs[i]` None is
    /// `MPI_DISTRIBUTE_DFLT_DARG`. The result has lb 0 and the extent of the
    /// whole array. A dimension with `Distrib::None` is not split (its psize
    /// is ignored, as MPICH does).
    #[allow(clippy::too_many_arguments)]
    pub fn darray(
        size: i64,
        rank: i64,
        gsizes: &[i64],
        distribs: &[Distrib],
        dargs: &[Option<i64>],
        psizes: &[i64],
        order: Order,
        old: &Arc<TypeDesc>,
    ) -> MpiResult<TypeDesc> {
        let nd = gsizes.len();
        if nd == 0 || distribs.len() != nd || dargs.len() != nd || psizes.len() != nd {
            mpi_bail!(
                MPI_ERR_ARG,
                "darray: ndims {} and argument array lengths disagree",
                nd
            );
        }
        if gsizes.iter().chain(psizes).any(|&g| g < 1) {
            mpi_bail!(
                MPI_ERR_ARG,
                "darray: global sizes and process grid sizes must be positive"
            );
        }
        if psizes.iter().try_fold(1i64, |a, &p| a.checked_mul(p)) != Some(size) {
            mpi_bail!(
                MPI_ERR_ARG,
                "darray: process grid {:?} does not have {} processes",
                psizes,
                size
            );
        }
        if rank < 0 || rank >= size {
            mpi_bail!(MPI_ERR_RANK, "darray: rank {} is not in 0..{}", rank, size);
        }
        // Process grid coordinates, row-major.
        let mut coords = vec![0i64; nd];
        let (mut left, mut r) = (size, rank);
        for d in 0..nd {
            left /= psizes[d];
            coords[d] = r / left;
            r %= left;
        }
        // Local runs (start, len) of global indices of each dimension.
        let mut runs: Vec<Vec<(i64, i64)>> = Vec::with_capacity(nd);
        for d in 0..nd {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            let mut v = Vec::new();
            match distribs[d] {
                Distrib::None => v.push((0, g)),
                Distrib::Block => {
                    let b = match dargs[d] {
                        None => (g + p - 1) / p,
                        Some(b) if b > 0 && b.saturating_mul(p) >= g => b,
                        Some(b) => mpi_bail!(
                            MPI_ERR_ARG,
                            "darray: block size {} of dimension {} does not cover {} elements on {} processes",
                            b,
                            d,
                            g,
                            p
                        ),
                    };
                    let start = c.saturating_mul(b);
                    if start < g {
                        v.push((start, b.min(g - start)));
                    }
                }
                Distrib::Cyclic => {
                    let b = match dargs[d] {
                        None => 1,
                        Some(b) if b > 0 => b,
                        Some(b) => mpi_bail!(
                            MPI_ERR_ARG,
                            "darray: cyclic block size {} is not positive",
                            b
                        ),
                    };
                    if g / p.saturating_mul(b) > MAX_BLOCKS as i64 {
                        mpi_bail!(
                            MPI_ERR_NO_MEM,
                            "darray: too many cyclic blocks in dimension {}",
                            d
                        );
                    }
                    let mut k = c.saturating_mul(b);
                    while k < g {
                        v.push((k, b.min(g - k)));
                        k = k.saturating_add(p.saturating_mul(b));
                    }
                }
            }
            runs.push(v);
        }
        // Build from the fastest varying dimension outwards; after each
        // dimension the type is resized to span that whole sub-array, so the
        // next dimension steps by it.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let mut t: Arc<TypeDesc> = old.clone();
        for &d in &dims {
            let ext = t.extent();
            let bls: Vec<i64> = runs[d].iter().map(|r| r.1).collect();
            let disps: Vec<isize> = runs[d]
                .iter()
                .map(|r| mul_disp(r.0, ext))
                .collect::<MpiResult<_>>()?;
            let h = Arc::new(Self::hindexed(&bls, &disps, &t)?);
            t = Arc::new(Self::resized(&h, 0, mul_disp(gsizes[d], ext)?)?);
        }
        let mut t = (*t).clone();
        t.combiner = Combiner::Darray {
            size,
            rank,
            gsizes: gsizes.to_vec(),
            distribs: distribs.to_vec(),
            dargs: dargs.to_vec(),
            psizes: psizes.to_vec(),
            order,
            old: old.clone(),
        };
        Ok(t)
    }

    // ---------------------------------------------------------------- queries

    /// One block whose copies at multiples of the extent touch: `n` elements
    /// are one run of `n * size` bytes.
    fn is_dense(&self) -> bool {
        self.blocks.len() == 1 && self.extent() == self.size as isize
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
    pub fn lb(&self) -> isize {
        self.lb
    }
    pub fn ub(&self) -> isize {
        self.ub
    }
    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }
    pub fn true_lb(&self) -> isize {
        self.true_lb
    }
    pub fn true_ub(&self) -> isize {
        self.true_ub
    }
    pub fn true_extent(&self) -> isize {
        self.true_ub - self.true_lb
    }
    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.size
    }
    /// Largest alignment of the basic types in the map.
    pub fn align(&self) -> usize {
        self.align
    }
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }
    /// True for predefined types (basic and pair).
    pub fn is_predefined(&self) -> bool {
        matches!(self.combiner, Combiner::Named(_))
    }
    /// The single `Elem` the type is made of, for reductions: Some when every
    /// block has the same basic type, or the type is (made of) one pair type.
    pub fn elem(&self) -> Option<Elem> {
        self.elem
    }

    /// Bytes of the packed stream of `count` elements.
    pub fn packed_size(&self, count: usize) -> usize {
        self.size.saturating_mul(count)
    }

    /// `MPI_Get_count`: whole elements in `bytes` of packed data, None
    /// (MPI_UNDEFINED) when `bytes` is not a whole number of elements.
    pub fn count_of(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return if bytes == 0 { Some(0) } else { None };
        }
        bytes.is_multiple_of(self.size).then_some(bytes / self.size)
    }

    /// `MPI_Get_elements`: basic elements in the first `bytes` bytes of the
    /// packed stream, None (MPI_UNDEFINED) when `bytes` ends inside a basic
    /// element. A pair type counts as two basic elements (value and index).
    pub fn elements_of(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return if bytes == 0 { Some(0) } else { None };
        }
        let per: usize = self.blocks.iter().map(|b| b.count).sum();
        let mut n = (bytes / self.size) * per;
        let mut rem = bytes % self.size;
        for b in self.blocks.iter() {
            if rem == 0 {
                break;
            }
            let take = rem.min(b.bytes());
            if take % b.basic.size() != 0 {
                return None;
            }
            n += take / b.basic.size();
            rem -= take;
        }
        Some(n)
    }

    /// True when the data of `count` elements is one contiguous run of
    /// `packed_size(count)` bytes starting at `buf + true_lb()`, in packed
    /// order: then no packing is needed.
    pub fn is_contiguous(&self, count: usize) -> bool {
        if count == 0 || self.size == 0 {
            return true;
        }
        self.adjacent
            && self.blocks[0].disp == self.true_lb
            && (count == 1 || self.extent() == self.size as isize)
    }

    pub fn kind(&self) -> CombinerKind {
        match self.combiner {
            Combiner::Named(_) => CombinerKind::Named,
            Combiner::Dup(_) => CombinerKind::Dup,
            Combiner::Contiguous { .. } => CombinerKind::Contiguous,
            Combiner::Vector { .. } => CombinerKind::Vector,
            Combiner::Hvector { .. } => CombinerKind::Hvector,
            Combiner::Indexed { .. } => CombinerKind::Indexed,
            Combiner::Hindexed { .. } => CombinerKind::Hindexed,
            Combiner::IndexedBlock { .. } => CombinerKind::IndexedBlock,
            Combiner::HindexedBlock { .. } => CombinerKind::HindexedBlock,
            Combiner::Struct { .. } => CombinerKind::Struct,
            Combiner::Subarray { .. } => CombinerKind::Subarray,
            Combiner::Darray { .. } => CombinerKind::Darray,
            Combiner::Resized { .. } => CombinerKind::Resized,
            Combiner::F90 { class, .. } => CombinerKind::F90(class),
        }
    }

    /// Constructor arguments in `MPI_Type_get_contents` layout; `envelope()`
    /// is their lengths. Empty for predefined types.
    pub fn contents(&self) -> Contents {
        let mut c = Contents::default();
        match &self.combiner {
            Combiner::Named(_) => {}
            Combiner::Dup(old) => c.types.push(old.clone()),
            Combiner::Contiguous { count, old } => {
                c.ints.push(*count);
                c.types.push(old.clone());
            }
            Combiner::Vector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.ints.extend([*count, *blocklen, *stride]);
                c.types.push(old.clone());
            }
            Combiner::Hvector {
                count,
                blocklen,
                stride,
                old,
            } => {
                c.ints.extend([*count, *blocklen]);
                c.addrs.push(*stride);
                c.types.push(old.clone());
            }
            Combiner::Indexed {
                blocklens,
                disps,
                old,
            } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.ints.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::Hindexed {
                blocklens,
                disps,
                old,
            } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.addrs.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::IndexedBlock {
                blocklen,
                disps,
                old,
            } => {
                c.ints.extend([disps.len() as i64, *blocklen]);
                c.ints.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::HindexedBlock {
                blocklen,
                disps,
                old,
            } => {
                c.ints.extend([disps.len() as i64, *blocklen]);
                c.addrs.extend(disps);
                c.types.push(old.clone());
            }
            Combiner::Struct {
                blocklens,
                disps,
                types,
            } => {
                c.ints.push(blocklens.len() as i64);
                c.ints.extend(blocklens);
                c.addrs.extend(disps);
                c.types.extend(types.iter().cloned());
            }
            Combiner::Subarray {
                sizes,
                subsizes,
                starts,
                order,
                old,
            } => {
                c.ints.push(sizes.len() as i64);
                c.ints.extend(sizes);
                c.ints.extend(subsizes);
                c.ints.extend(starts);
                c.ints.push(order_code(*order));
                c.types.push(old.clone());
            }
            Combiner::Darray {
                size,
                rank,
                gsizes,
                distribs,
                dargs,
                psizes,
                order,
                old,
            } => {
                c.ints.extend([*size, *rank, gsizes.len() as i64]);
                c.ints.extend(gsizes);
                c.ints.extend(distribs.iter().map(|d| match d {
                    Distrib::Block => 0,
                    Distrib::Cyclic => 1,
                    Distrib::None => 2,
                }));
                c.ints.extend(dargs.iter().map(|d| d.unwrap_or(-1)));
                c.ints.extend(psizes);
                c.ints.push(order_code(*order));
                c.types.push(old.clone());
            }
            Combiner::Resized { lb, extent, old } => {
                c.addrs.extend([*lb, *extent]);
                c.types.push(old.clone());
            }
            Combiner::F90 { p, r, .. } => {
                c.ints.extend(p.iter().copied());
                c.ints.push(*r);
            }
        }
        if self.large {
            match &self.combiner {
                Combiner::Subarray { sizes, .. } => {
                    // ints [ndims, order], large [sizes, subsizes, starts]
                    let nd = sizes.len();
                    c.large = c.ints[1..1 + 3 * nd].to_vec();
                    c.ints = vec![nd as i64, c.ints[1 + 3 * nd]];
                }
                Combiner::Darray { gsizes, .. } => {
                    // ints without gsizes, large [gsizes]
                    let nd = gsizes.len();
                    c.large = c.ints.drain(3..3 + nd).collect();
                }
                _ => {
                    c.large = c
                        .ints
                        .drain(..)
                        .chain(c.addrs.drain(..).map(|a| a as i64))
                        .collect();
                }
            }
        }
        c
    }

    /// Mark the type as made by a large-count (`_c`) constructor, which
    /// moves its counts and displacements to `Contents::large`.
    pub fn with_large_counts(mut self) -> TypeDesc {
        self.large = !matches!(self.combiner, Combiner::Named(_));
        self
    }

    /// (num_integers, num_addresses, num_large_counts, num_datatypes) of
    /// `MPI_Type_get_envelope_c` (`MPI_Type_get_envelope` has no large counts).
    pub fn envelope(&self) -> (usize, usize, usize, usize) {
        let c = self.contents();
        (c.ints.len(), c.addrs.len(), c.large.len(), c.types.len())
    }
}

fn order_code(o: Order) -> i64 {
    match o {
        Order::C => 0,
        Order::Fortran => 1,
    }
}

mod external32;
mod pack;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bench;
