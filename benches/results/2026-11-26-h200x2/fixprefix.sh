#!/bin/bash
# fixprefix.sh PREFIX: rewrite the absolute install prefix in the wrappers to where PREFIX now is
P=$(cd "$1" && pwd)
old=$(sed -n 's/^prefix=\(.*\)/\1/p' "$P/lib/pkgconfig/mpi.pc" | head -1)
[ -n "$old" ] && [ "$old" != "$P" ] && sed -i "s|$old|$P|g" "$P/bin/mpicc" "$P/bin/mpicxx" "$P/lib/pkgconfig/"*.pc
echo "prefix $P (was $old)"
