#!/bin/bash
# unpack.sh: extract the carried build/pack/*.txz (installs, their sources, unit binaries) into build/
cd "$(dirname "$0")/../../.."; for f in build/pack/*.txz; do tar xJf $f -C build; done; ls build
