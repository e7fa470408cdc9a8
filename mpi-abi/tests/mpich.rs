//! The MPICH-ABI data (data/mpich.txt) and its generator (emit_mpich.rs).

use std::collections::BTreeSet;

#[test]
fn mpich_values_cover_the_standard_handles() {
    let abi = mpi_abi::load();
    let m = mpi_abi::load_mpich();
    for h in abi
        .handles
        .iter()
        // MPIX_Stream has no MPICH form: its functions are refused in libmpi.so.12.
        .filter(|h| !h.tool && !h.mpix && h.name != "MPI_File")
    {
        let (_, vals) = m
            .handles
            .iter()
            .find(|(t, _)| t == &h.name)
            .unwrap_or_else(|| panic!("mpich.txt has no @handle {}", h.name));
        for v in &h.values {
            assert!(
                vals.iter().any(|(n, _)| n == &v.name),
                "mpich.txt lacks {}",
                v.name
            );
        }
        // MPICH's predefined handles are distinct within a type (aliases aside) and never look
        // like the library's user handles (top two bits 11).
        let mut seen = BTreeSet::new();
        for (name, v) in vals {
            let Some(v) = v else { continue };
            assert_ne!(
                *v as u32 >> 30,
                3,
                "{name} {v:#x} has the user-handle pattern"
            );
            seen.insert(*v);
        }
    }
    // Spot checks against MPICH's mpi.h.
    let comm = &m.handles.iter().find(|(t, _)| t == "MPI_Comm").unwrap().1;
    assert!(comm.contains(&("MPI_COMM_WORLD".into(), Some(0x4400_0000))));
    let rank = &m.classes.iter().find(|(c, _)| c == "rank").unwrap().1;
    assert!(rank.contains(&("MPI_ANY_SOURCE".into(), -2)));
    assert_eq!(m.class_of("MPI_Send", "dest"), Some("rank"));
    assert_eq!(m.class_of("MPI_Abort", "errorcode"), None);
    assert_eq!(m.class_of("MPI_Error_class", "errorcode"), Some("error"));
}

#[test]
fn generator_forwards_every_function() {
    let abi = mpi_abi::load();
    let m = mpi_abi::load_mpich();
    // What gpumpi implements and what mpich/src/hand.rs writes, as mpich/build.rs reads them.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scanned = mpi_abi::scan_implemented(&root.join("src/abi/imp")).unwrap();
    let all: BTreeSet<String> = abi
        .functions
        .iter()
        .filter(|f| mpi_abi::target(&abi, &scanned, f).implemented())
        .map(|f| f.name().to_string())
        .collect();
    let hand_src = std::fs::read_to_string(root.join("mpich/src/hand.rs")).unwrap();
    let hand = mpi_abi::scan_hand_written(&abi, &hand_src);
    assert!(hand.contains("MPI_Op_create") && hand.contains("MPI_Abi_get_version"));
    let code = match mpi_abi::rust_mpich(&abi, &m, &all, &hand) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert!(code.contains("pub unsafe extern \"C\" fn PMPI_Send(buf: *const c_void, count: c_int, datatype: c_int, dest: c_int, tag: c_int, comm: c_int) -> c_int"));
    assert!(code.contains("pub unsafe extern \"C\" fn MPI_Send("));
    // Ranks and tags are translated, the status is MPICH's.
    assert!(code.contains("let source_s = rank_to_std(source);"));
    assert!(code.contains("let tag_s = tag_to_std(tag);"));
    assert!(code.contains("fn PMPI_Recv(buf: *mut c_void, count: c_int, datatype: c_int, source: c_int, tag: c_int, comm: c_int, status: *mut MpichStatus)"));
    // MPICH's error classes differ from the standard's: MPI_ERR_REQUEST is 19 there, 7 here.
    assert!(code.contains("pub fn error_from_std(v: c_int) -> c_int {\n    match v {"));
    assert!(code.contains("        7 => 19,"));
    // Handle conversions are the identity in the MPICH ABI.
    assert!(code
        .contains("pub unsafe extern \"C\" fn MPI_Comm_c2f(comm: c_int) -> c_int {\n    comm\n}"));
}
