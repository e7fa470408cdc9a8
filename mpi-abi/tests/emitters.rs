//! The Rust emitters produce the shapes the contract (docs/CONTRACTS.md section 1) promises.

use std::collections::BTreeSet;

fn wrappers(implemented: &[&str]) -> String {
    let abi = mpi_abi::load();
    let set: BTreeSet<String> = implemented.iter().map(|s| s.to_string()).collect();
    mpi_abi::rust_wrappers(&abi, &set)
}

/// The body of exported function `name` in `text`.
fn item<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text
        .find(&format!("pub unsafe extern \"C\" fn {name}("))
        .unwrap_or_else(|| panic!("{name}"));
    let end = text[start..].find("\n}\n").unwrap() + start;
    &text[start..end]
}

#[test]
fn implemented_functions_call_imp_under_guard() {
    let w = wrappers(&[
        "MPI_Send",
        "MPI_Wtime",
        "MPI_Comm_f2c",
        "MPI_Win_fence",
        "MPI_Comm_toint",
    ]);
    let send = item(&w, "MPI_Send");
    assert!(send.contains(
        "buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) -> c_int"
    ));
    assert!(send.contains(
        "crate::abi::guard(\"MPI_Send\", crate::abi::ErrObj::Comm(comm), || crate::abi::imp::MPI_Send::<crate::abi::width::IntCounts>(buf, count, datatype, dest, tag, comm))"
    ));
    assert_eq!(
        item(&w, "PMPI_Send").replace("PMPI_Send", "MPI_Send"),
        send,
        "PMPI twin is identical"
    );
    assert!(item(&w, "MPI_Win_fence").contains("crate::abi::ErrObj::Win(win)"));
    assert!(item(&w, "MPI_Wtime")
        .contains("crate::abi::guard_value(\"MPI_Wtime\", 0.0, || crate::abi::imp::MPI_Wtime())"));
    assert!(item(&w, "MPI_Comm_f2c").contains("-> MPI_Comm"));
    assert!(item(&w, "MPI_Comm_f2c")
        .contains("guard_value(\"MPI_Comm_f2c\", crate::abi::consts::MPI_COMM_NULL,"));
    assert!(item(&w, "MPI_Comm_toint").contains("guard_value(\"MPI_Comm_toint\", 0,"));
    assert!(w.contains("(\"MPI_Send\", true),") && w.contains("(\"MPI_Recv\", false),"));
}

#[test]
fn large_count_forms_share_one_width_generic_core() {
    // MPI_Send implemented alone: one core for MPI_Send and MPI_Send_c, each wrapper naming itself.
    let w = wrappers(&[
        "MPI_Send",
        "MPI_Type_size",
        "MPI_Get_count",
        "MPI_Get_count_c",
    ]);
    let send_c = item(&w, "MPI_Send_c");
    assert!(send_c.contains("count: MPI_Count"));
    assert!(send_c.contains(
        "crate::abi::guard(\"MPI_Send_c\", crate::abi::ErrObj::Comm(comm), || crate::abi::imp::MPI_Send::<crate::abi::width::LargeCounts>(buf, count, datatype, dest, tag, comm))"
    ));
    assert!(w.contains("(\"MPI_Send_c\", true),") && w.contains("(\"MPI_Recv_c\", false),"));
    // A deprecated _x form with the parameters of the _c form goes to the same core.
    assert!(item(&w, "MPI_Type_size_x").contains(
        "guard(\"MPI_Type_size_x\", crate::abi::ErrObj::None, || crate::abi::imp::MPI_Type_size::<crate::abi::width::LargeCounts>(datatype, size))"
    ));
    // Both forms written by hand: each is called directly.
    assert!(item(&w, "MPI_Get_count").contains("crate::abi::imp::MPI_Get_count(status,"));
    assert!(item(&w, "MPI_Get_count_c").contains("crate::abi::imp::MPI_Get_count_c(status,"));
}

#[test]
fn unimplemented_functions_report_unsupported() {
    let w = wrappers(&[]);
    assert!(item(&w, "MPI_Recv").contains("crate::abi::unsupported(\"MPI_Recv\")"));
    let wtick = item(&w, "MPI_Wtick");
    assert!(
        wtick.contains("crate::abi::unsupported(\"MPI_Wtick\");")
            && wtick.trim_end().ends_with("0.0")
    );
    assert!(item(&w, "MPI_Type_f2c")
        .trim_end()
        .ends_with("crate::abi::consts::MPI_DATATYPE_NULL"));
    // ErrObj::None when there is no by-value comm/win/file/session.
    let w = wrappers(&["MPI_Comm_free", "MPI_Type_size"]);
    assert!(item(&w, "MPI_Comm_free").contains("crate::abi::ErrObj::None"));
}

#[test]
fn signatures_map_c_types() {
    let w = wrappers(&[]);
    assert!(w.contains("pub unsafe extern \"C\" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int"));
    assert!(item(&w, "MPI_Group_range_incl").contains("ranges: *mut [c_int; 3]"));
    assert!(item(&w, "MPI_Op_create")
        .contains("user_fn: Option<MPI_User_function>, commute: c_int, op: *mut MPI_Op"));
    assert!(item(&w, "MPI_Comm_spawn_multiple").contains("array_of_argv: *mut *mut *mut c_char"));
    assert!(item(&w, "MPI_Comm_spawn_multiple").contains("array_of_info: *const MPI_Info"));
    assert!(item(&w, "MPI_T_event_handle_free")
        .contains("free_cb_function: Option<MPI_T_event_free_cb_function>"));
    assert!(item(&w, "MPI_Aint_add").contains("(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint"));
    // Variadic MPI_Pcontrol is exported with its fixed parameter only.
    assert!(item(&w, "MPI_Pcontrol")
        .starts_with("pub unsafe extern \"C\" fn MPI_Pcontrol(level: c_int) -> c_int"));
    // Extensions: MPIX has no PMPI twin; everything else has one.
    assert!(w.contains("fn MPIX_Query_cuda_support() -> c_int") && !w.contains("PMPIX_"));
    assert!(w.contains("fn PMPI_T_init_thread(") && w.contains("fn PMPI_Comm_c2f("));
}

#[test]
fn ffi_and_consts_shapes() {
    let abi = mpi_abi::load();
    let ffi = mpi_abi::rust_ffi(&abi);
    for want in [
        "pub type MPI_Comm = *mut MPI_ABI_Comm;",
        "#[repr(C)]\npub struct MPI_ABI_Comm {\n    _private: [u8; 0],\n}",
        "pub type MPI_Aint = isize;",
        "pub type MPI_Offset = i64;",
        "pub type MPI_Count = i64;",
        "pub type MPI_Fint = c_int;",
        "#[derive(Clone, Copy, Debug, Default)]\npub struct MPI_Status {\n    pub MPI_SOURCE: c_int,\n    pub MPI_TAG: c_int,\n    pub MPI_ERROR: c_int,\n    pub MPI_internal: [c_int; 5],\n}",
        "pub type MPI_User_function = unsafe extern \"C\" fn(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, datatype: *mut MPI_Datatype);",
        "pub type MPI_Comm_errhandler_function = unsafe extern \"C\" fn(comm: *mut MPI_Comm, error_code: *mut c_int, ...);",
        "pub type MPI_Comm_errhandler_fn = MPI_Comm_errhandler_function;",
        "pub type MPI_T_enum = *mut MPI_T_enum_t;",
        "pub type MPI_T_cb_safety = c_int;",
    ] {
        assert!(ffi.contains(want), "ffi.rs lacks:\n{want}");
    }
    let consts = mpi_abi::rust_consts(&abi);
    for want in [
        "pub const MPI_COMM_WORLD: MPI_Comm = 0x101 as MPI_Comm;",
        "pub const MPI_INT: MPI_Datatype = 0x209 as MPI_Datatype;",
        "pub const MPI_LONG_LONG_INT: MPI_Datatype = MPI_LONG_LONG;",
        "pub const MPI_SUCCESS: c_int = 0;",
        "pub const MPI_UNDEFINED: c_int = -32766;",
        "pub const MPI_STATUS_IGNORE: *mut MPI_Status = ::std::ptr::null_mut();",
        "pub const MPI_DISPLACEMENT_CURRENT: MPI_Offset = -1;",
        "pub const MPI_COMM_DUP_FN: usize = 0x1;",
        "        MPI_ERR_ERRHANDLER => \"MPI_ERR_ERRHANDLER\",",
    ] {
        assert!(consts.contains(want), "consts.rs lacks:\n{want}");
    }
}
