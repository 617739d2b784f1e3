#!/usr/bin/env bash
# Build the container images phalanx's examples run in, offline where possible.
# Run with --help for what it builds and how; examples/containers/README.md for how to
# use the images.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
REPO=$(cd "$HERE/../.." && pwd)

PATH_VALUE=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
BUSYBOX_REF=docker.io/library/busybox:latest
SUITE=bookworm
PY_VERSION=3.11 # Debian bookworm's python3
# torch and what `import torch; import torch.distributed.run` needs (pure Python).
TORCH_DISTS=(torch typing_extensions sympy mpmath networkx jinja2 markupsafe filelock fsspec)
# Copied too when installed: without numpy, `import torch` warns "Failed to initialize NumPy".
TORCH_OPTIONAL=(numpy)

usage() {
  cat <<EOF
Usage: examples/containers/build-images.sh [OPTIONS]

Build test container images for phalanx into DIR (default: examples/containers/out/).

  busybox-oci/   OCI image layout of a static busybox (Debian's busybox-static) with
                 its applets, /etc/os-release, passwd/group (root, nobody) and /tmp;
                 tag 'latest', named $BUSYBOX_REF
                 (io.containerd.image.name); Env PATH, Cmd ["sh"], WorkingDir "/"
  busybox.sqsh   the same root file system as an enroot squashfs image
                 (/etc/environment holds PATH)
  pytorch.sqsh   with --python: Debian $SUITE (mmdebstrap --variant=essential) with
                 python3, the host's PyTorch, its pure-Python dependencies (and numpy,
                 if installed) in /usr/local/lib/python$PY_VERSION/dist-packages,
                 /usr/local/bin/torchrun and /workspace/train_distributed.py
                 (examples/slurm/train_distributed.py); a broken image (torch does not
                 import in it) fails the build

The busybox images need no network and take about a second; --python downloads
Debian packages from a mirror and takes about half a minute.

Options:
  -o, --out DIR          output directory (default: examples/containers/out)
      --python           also build pytorch.sqsh
      --python-from PY   the Python $PY_VERSION whose site-packages has torch (default: the
                         repository's .venv/bin/python, else python3)
      --mirror URL       Debian mirror for --python (default: the host's, from
                         /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list;
                         else http://deb.debian.org/debian)
      --security-mirror URL|none
                         mirror of $SUITE-security (default: the host's, if any)
      --busybox PATH     a statically linked busybox (default: /usr/bin/busybox or
                         /bin/busybox, from Debian's busybox-static)
  -h, --help             show this help

Needs Debian's busybox-static, umoci and squashfs-tools; --python also mmdebstrap.
Runs as root or as another user: umoci then unpacks --rootless, and mmdebstrap uses
its unshare mode (user namespaces, with ranges in /etc/subuid and /etc/subgid).
EOF
}

die() {
  echo "build-images.sh: error: $*" >&2
  exit 1
}

# --------------------------------------------------------------------------- timing

now_us() { echo "${EPOCHREALTIME//[!0-9]/}"; }

seconds_since() { # START_US -> "1.23"
  local d=$(($(now_us) - $1))
  printf '%d.%02d' $((d / 1000000)) $(((d % 1000000) / 10000))
}

STEP_NAME="" STEP_T0=0
step() {
  STEP_NAME=$1
  STEP_T0=$(now_us)
}
step_done() { printf '  %-52s %7ss\n' "$STEP_NAME" "$(seconds_since "$STEP_T0")"; }

human_size() { du -sh "$1" 2>/dev/null | cut -f1; }

# --------------------------------------------------------------------------- pytorch: inside

# The steps that need the image's root file system as root: run directly as root, else
# inside mmdebstrap's user namespace (mmdebstrap --unshare-helper), where the files
# mmdebstrap created (owned by subordinate ids outside) are owned by root.
# shellcheck disable=SC2153 # ROOTFS, TOPS, TRAIN and SQSH come from ENV_FILE
post_bootstrap() { # ENV_FILE
  # shellcheck disable=SC1090
  source "$1"
  local dest="$ROOTFS/usr/local/lib/python$PY_VERSION/dist-packages" top

  step "copy torch and dependencies (${#TOPS[@]} entries)"
  mkdir -p "$dest"
  for top in "${TOPS[@]}"; do
    cp -a --no-preserve=ownership "$top" "$dest/"
  done
  step_done

  step "torchrun, /workspace, /etc/environment"
  mkdir -p "$ROOTFS/usr/local/bin" "$ROOTFS/workspace"
  cat >"$ROOTFS/usr/local/bin/torchrun" <<'EOF'
#!/usr/bin/python3
import sys

from torch.distributed.run import main

if __name__ == "__main__":
    sys.exit(main())
EOF
  chmod 0755 "$ROOTFS/usr/local/bin/torchrun"
  install -m 0644 "$TRAIN" "$ROOTFS/workspace/train_distributed.py"
  write_environment "$ROOTFS"
  step_done

  step "verify: chroot ROOTFS python3 -c 'import torch'"
  # As root, mmdebstrap made /dev's nodes; in unshare mode /dev is empty, and torch
  # needs /dev/urandom: the host's are bound for the check, in this private mount
  # namespace, and removed before squashing.
  local node bound=()
  for node in null zero random urandom; do
    if [ ! -e "$ROOTFS/dev/$node" ]; then
      mkdir -p "$ROOTFS/dev"
      : >"$ROOTFS/dev/$node"
      mount --bind "/dev/$node" "$ROOTFS/dev/$node"
      bound+=("$ROOTFS/dev/$node")
    fi
  done
  local version rc=0
  version=$(env -i PATH="$PATH_VALUE" HOME=/root LANG=C.UTF-8 chroot "$ROOTFS" \
    /usr/bin/python3 -c '
import torch, torch.distributed, torch.distributed.run
assert torch.distributed.is_available() and torch.distributed.is_gloo_available()
print(torch.__version__)') || rc=$?
  for node in ${bound[@]+"${bound[@]}"}; do
    umount "$node"
    rm -f "$node"
  done
  [ "$rc" -eq 0 ] || die "the python image is broken: python3 cannot import torch inside it (see above)"
  step_done
  echo "    torch $version imports inside the image"

  step "mksquashfs pytorch.sqsh ($(human_size "$ROOTFS"))"
  squash "$ROOTFS" "$SQSH" lz4
  step_done
}

write_environment() { # ROOTFS: PATH in /etc/environment, as enroot import writes Env
  local file="$1/etc/environment"
  [ -L "$file" ] && rm -f "$file"
  if ! grep -qs '^PATH=' "$file"; then
    echo "PATH=$PATH_VALUE" >>"$file"
  fi
  chmod 0644 "$file"
}

squash() { # ROOTFS OUT COMPRESSOR [mksquashfs options...]
  local rootfs=$1 out=$2 comp=$3
  shift 3
  rm -f "$out.tmp"
  if ! mksquashfs "$rootfs" "$out.tmp" -noappend -quiet -comp "$comp" "$@" >/dev/null 2>"$out.err"; then
    if [ "$comp" = gzip ]; then
      cat "$out.err" >&2
      rm -f "$out.err" "$out.tmp"
      die "mksquashfs failed"
    fi
    echo "    mksquashfs refused -comp $comp ($(head -n1 "$out.err")); using gzip"
    rm -f "$out.tmp"
    mksquashfs "$rootfs" "$out.tmp" -noappend -quiet -comp gzip "$@" >/dev/null ||
      { rm -f "$out.err" "$out.tmp"; die "mksquashfs failed"; }
  fi
  rm -f "$out.err"
  chmod 0644 "$out.tmp"
  mv -f "$out.tmp" "$out"
}

if [ "${1:-}" = "__post-bootstrap" ]; then
  post_bootstrap "$2"
  exit 0
fi

# --------------------------------------------------------------------------- options

OUT_DIR="$HERE/out"
BUILD_PYTHON=0
PYTHON_FROM=""
MIRROR=""
SECURITY_MIRROR=""
BUSYBOX=""

need_arg() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi
}

while [ $# -gt 0 ]; do
  case $1 in
  -h | --help)
    usage
    exit 0
    ;;
  -o | --out)
    need_arg "$@"
    OUT_DIR=$2
    shift 2
    ;;
  --out=*) OUT_DIR=${1#*=} && shift ;;
  --python) BUILD_PYTHON=1 && shift ;;
  --python-from)
    need_arg "$@"
    PYTHON_FROM=$2
    shift 2
    ;;
  --python-from=*) PYTHON_FROM=${1#*=} && shift ;;
  --mirror)
    need_arg "$@"
    MIRROR=$2
    shift 2
    ;;
  --mirror=*) MIRROR=${1#*=} && shift ;;
  --security-mirror)
    need_arg "$@"
    SECURITY_MIRROR=$2
    shift 2
    ;;
  --security-mirror=*) SECURITY_MIRROR=${1#*=} && shift ;;
  --busybox)
    need_arg "$@"
    BUSYBOX=$2
    shift 2
    ;;
  --busybox=*) BUSYBOX=${1#*=} && shift ;;
  *) die "unknown argument: $1 (see --help)" ;;
  esac
done

umask 022
export LC_ALL=C
IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

missing=()
for tool in umoci mksquashfs; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ "$BUILD_PYTHON" -eq 1 ] && ! command -v mmdebstrap >/dev/null; then
  missing+=(mmdebstrap)
fi
if [ ${#missing[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${missing[@]}" | sed 's/^mksquashfs$/squashfs-tools/' | tr '\n' ' ')
  die "missing ${missing[*]}: apt-get install ${packages% }"
fi
for tool in jq python3; do
  if command -v "$tool" >/dev/null; then JSON_TOOL=$tool && break; fi
done
[ -n "${JSON_TOOL:-}" ] || die "needs jq or python3 to edit the OCI index.json"

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
[[ $OUT_DIR != *"'"* ]] || die "the output directory's path may not contain a quote: $OUT_DIR"
WORK=$(mktemp -d "$OUT_DIR/.work.XXXXXX")
UNSHARED=() # what mmdebstrap's user namespace created: its root removes them

cleanup() {
  local rc=$?
  if [ ${#UNSHARED[@]} -gt 0 ]; then
    mmdebstrap --unshare-helper rm -rf "${UNSHARED[@]}" 2>/dev/null || true
  fi
  chmod -R u+w "$WORK" 2>/dev/null || true
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --------------------------------------------------------------------------- busybox

is_static() { # a statically linked ELF executable (no program interpreter)
  local out
  if command -v ldd >/dev/null; then
    out=$(ldd "$1" 2>&1 || true)
    case $out in *"not a dynamic executable"* | *"statically linked"*) return 0 ;; esac
    return 1
  fi
  command -v file >/dev/null || die "cannot tell whether $1 is static: neither ldd nor file is installed"
  file -L "$1" | grep -q "statically linked"
}

find_busybox() {
  local candidates=("$@") path
  [ ${#candidates[@]} -gt 0 ] || candidates=(/usr/bin/busybox /bin/busybox)
  for path in "${candidates[@]}"; do
    if [ -f "$path" ] && [ -x "$path" ]; then
      if is_static "$path"; then
        echo "$path"
        return 0
      fi
      echo "build-images.sh: $path is dynamically linked: it would not run inside an image" >&2
    fi
  done
  return 1
}

build_busybox() {
  local bb root="$WORK/busybox-rootfs" layout="$WORK/busybox-oci" rootless=() applet version
  if [ -n "$BUSYBOX" ]; then
    bb=$(find_busybox "$BUSYBOX") || die "$BUSYBOX: not a statically linked busybox"
  else
    bb=$(find_busybox) || die "no statically linked busybox: apt-get install busybox-static"
  fi
  version=$("$bb" 2>&1 | sed -n '1s/^BusyBox v\([^ ]*\).*/\1/p')
  echo "busybox: $bb (${version:-unknown version})"
  [ "$IS_ROOT" -eq 1 ] || rootless=(--rootless)

  step "root file system (applets, /etc, /tmp)"
  mkdir -p "$root"/{bin,etc,root,tmp,proc,sys,dev}
  cp "$bb" "$root/bin/busybox"
  chmod 0755 "$root/bin/busybox"
  while read -r applet; do
    case $applet in busybox | */* | "") continue ;; esac
    ln -s busybox "$root/bin/$applet"
  done < <("$bb" --list)
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$root/etc/group"
  cat >"$root/etc/os-release" <<EOF
NAME="phalanx test image (busybox)"
ID=busybox
VERSION_ID="${version:-unknown}"
PRETTY_NAME="phalanx test image (busybox ${version:-})"
EOF
  chmod 0700 "$root/root"
  chmod 1777 "$root/tmp"
  step_done

  step "OCI layout busybox-oci (umoci)"
  umoci init --layout "$layout"
  umoci new --image "$layout:latest"
  umoci unpack "${rootless[@]}" --image "$layout:latest" "$WORK/bundle" >/dev/null
  cp -a "$root/." "$WORK/bundle/rootfs/"
  umoci repack --image "$layout:latest" "$WORK/bundle" >/dev/null
  umoci config --image "$layout:latest" \
    --config.env="PATH=$PATH_VALUE" --config.cmd=sh --config.workingdir=/ \
    --history.created_by="examples/containers/build-images.sh"
  umoci gc --layout "$layout"
  # phalanx image import (like containerd) names an image after the full reference in
  # io.containerd.image.name when org.opencontainers.image.ref.name is only a tag.
  annotate_index "$layout/index.json" latest "$BUSYBOX_REF"
  rm -rf "$OUT_DIR/busybox-oci"
  mv "$layout" "$OUT_DIR/busybox-oci"
  step_done

  step "squashfs busybox.sqsh (mksquashfs)"
  write_environment "$root"
  squash "$root" "$OUT_DIR/busybox.sqsh" gzip -all-root
  step_done
}

annotate_index() { # INDEX_JSON TAG NAME
  local index=$1 tag=$2 name=$3
  if [ "$JSON_TOOL" = jq ]; then
    jq -c --arg tag "$tag" --arg name "$name" '.manifests |= map(
        if (.annotations // {})["org.opencontainers.image.ref.name"] == $tag
        then .annotations["io.containerd.image.name"] = $name else . end)' \
      "$index" >"$index.new"
  else
    python3 - "$index" "$tag" "$name" >"$index.new" <<'EOF'
import json, sys
index, tag, name = sys.argv[1:]
with open(index) as f:
    data = json.load(f)
for desc in data["manifests"]:
    annotations = desc.setdefault("annotations", {})
    if annotations.get("org.opencontainers.image.ref.name") == tag:
        annotations["io.containerd.image.name"] = name
json.dump(data, sys.stdout, separators=(",", ":"))
EOF
  fi
  grep -q "io.containerd.image.name" "$index.new" || die "$index: no manifest tagged $tag"
  mv "$index.new" "$index"
}

# --------------------------------------------------------------------------- pytorch

# The host's Debian mirrors: "MAIN SECURITY" (SECURITY may be empty).
host_mirrors() {
  local main="" security="" file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    # deb822 stanzas: the URIs of enabled 'deb' stanzas, by whether Suites is -security.
    while read -r kind uri; do
      if [ "$kind" = security ]; then
        [ -n "$security" ] || security=$uri
      else
        [ -n "$main" ] || main=$uri
      fi
    done < <(awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no" && uris != "")
          print (suites ~ /-security/ ? "security" : "main"), uris
        types = ""; uris = ""; suites = ""; enabled = ""
      }
      /^[ \t]*$/ { flush(); next }
      /^#/ { next }
      tolower($1) == "types:" { $1 = ""; types = substr($0, 2) }
      tolower($1) == "uris:" { uris = $2 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      tolower($1) == "enabled:" { enabled = tolower($2) }
      END { flush() }' "$file")
  done
  if [ -f /etc/apt/sources.list ]; then
    while read -r uri suite; do
      case $suite in
      *-security) [ -n "$security" ] || security=$uri ;;
      *) [ -n "$main" ] || main=$uri ;;
      esac
    done < <(awk '$1 == "deb" {
      i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      print $i, $(i + 1) }' /etc/apt/sources.list)
  fi
  echo "${main:-http://deb.debian.org/debian} $security"
}

torch_files() { # PYTHON: the site-packages entries of TORCH_DISTS, one per line
  "$1" - "${TORCH_DISTS[@]}" "${TORCH_OPTIONAL[@]/#/?}" <<'EOF'
import importlib.metadata as md
import sys

want = (3, 11)
if sys.version_info[:2] != want:
    sys.exit(f"{sys.executable} is Python {sys.version_info[0]}.{sys.version_info[1]}: "
             f"the image's python3 (Debian bookworm) is {want[0]}.{want[1]}; "
             "use --python-from with a Python 3.11 that has torch")
missing = []
for name in sys.argv[1:]:
    optional = name.startswith("?")
    name = name.lstrip("?")
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        if optional:
            print(f"# ({name}: not installed, not copied)", file=sys.stderr)
        else:
            missing.append(name)
        continue
    tops = set()
    for f in dist.files or ():
        first = f.parts[0]
        if first not in ("..", "__pycache__") and not first.startswith("/"):
            tops.add(first)
    for top in sorted(tops):
        path = dist.locate_file(top)
        if path.exists():
            print(path)
    print(f"# {dist.metadata['Name']} {dist.version}", file=sys.stderr)
if missing:
    sys.exit(f"{sys.executable}: not installed: {', '.join(missing)} (pip install torch)")
EOF
}

TRAIN="$REPO/examples/slurm/train_distributed.py"

find_torch() { # before anything is built: what to copy into the pytorch image
  local python=${PYTHON_FROM:-}
  if [ -z "$python" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then python=$REPO/.venv/bin/python; else python=python3; fi
  fi
  command -v "$python" >/dev/null || die "--python-from: $python: not found"
  [ -f "$TRAIN" ] || die "$TRAIN: no such file"
  step "find torch in $python"
  if ! torch_files "$python" >"$WORK/torch-files" 2>"$WORK/torch-dists"; then
    cat "$WORK/torch-dists" >&2
    die "cannot copy torch from $python"
  fi
  step_done
  sed 's/^# /    /' "$WORK/torch-dists"
}

build_python() {
  local main security mode rootfs sqsh t0 env_file share hint
  local -a tops
  mapfile -t tops <"$WORK/torch-files"
  read -r main security <<<"$(host_mirrors)"
  [ -z "$MIRROR" ] || main=$MIRROR
  [ -z "$SECURITY_MIRROR" ] || security=$SECURITY_MIRROR
  [ "$security" != none ] || security=""
  local -a sources=("deb $main $SUITE main" "deb $main $SUITE-updates main")
  [ -z "$security" ] || sources+=("deb $security $SUITE-security main")
  echo "  apt sources of the image:"
  printf '    %s\n' "${sources[@]}"

  if [ "$IS_ROOT" -eq 1 ]; then
    mode=root
    rootfs="$WORK/pytorch-rootfs"
    sqsh="$WORK/pytorch.sqsh"
  else
    # The root of mmdebstrap's user namespace is a subordinate uid (/etc/subuid), not
    # this user: it writes the root file system and the squashfs file in a directory
    # it may write to but not list, under names it cannot guess.
    mode=unshare
    chmod 0755 "$WORK"
    share=$(mktemp -d "$WORK/unshared.XXXXXX")
    chmod 1733 "$share"
    rootfs="$share/rootfs.$(basename "$(mktemp -u)")"
    sqsh="$share/pytorch.$(basename "$(mktemp -u)").sqsh"
    UNSHARED=("$rootfs" "$sqsh" "$sqsh.tmp" "$sqsh.err")
  fi
  step "mmdebstrap --variant=essential $SUITE (--mode=$mode)"
  t0=$(now_us)
  if ! mmdebstrap --quiet --mode="$mode" --variant=essential \
    --include=python3-minimal,python3,libstdc++6 \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$rootfs" "${sources[@]}"; then
    hint="is the mirror reachable? (--mirror URL)"
    [ "$mode" = root ] || hint="$hint; does $(id -un) have ranges in /etc/subuid and /etc/subgid?"
    die "mmdebstrap failed: $hint"
  fi
  step_done

  env_file="$WORK/post-bootstrap.env"
  {
    declare -p PATH_VALUE PY_VERSION
    printf 'ROOTFS=%q\nTRAIN=%q\nSQSH=%q\n' "$rootfs" "$TRAIN" "$sqsh"
    printf 'TOPS=('
    printf '%q ' "${tops[@]}"
    printf ')\n'
  } >"$env_file"
  chmod 0644 "$env_file"
  if [ "$mode" = root ]; then
    bash "$SELF" __post-bootstrap "$env_file"
  else
    mmdebstrap --unshare-helper /bin/bash "$SELF" __post-bootstrap "$env_file"
  fi

  step "remove the root file system"
  if [ "$mode" = root ]; then
    rm -rf "$rootfs"
    mv -f "$sqsh" "$OUT_DIR/pytorch.sqsh"
  else
    # A copy: owned by this user, not by the namespace's root.
    cp "$sqsh" "$OUT_DIR/pytorch.sqsh.tmp"
    mv -f "$OUT_DIR/pytorch.sqsh.tmp" "$OUT_DIR/pytorch.sqsh"
    mmdebstrap --unshare-helper rm -rf "${UNSHARED[@]}"
    UNSHARED=()
  fi
  step_done
  echo "  pytorch total: $(seconds_since "$t0")s since mmdebstrap started"
}

# --------------------------------------------------------------------------- main

T_ALL=$(now_us)
if [ "$BUILD_PYTHON" -eq 1 ]; then
  echo "==> pytorch image: torch from the host"
  find_torch
fi
echo "==> busybox images"
build_busybox
if [ "$BUILD_PYTHON" -eq 1 ]; then
  echo "==> pytorch image"
  build_python
fi
echo "==> done in $(seconds_since "$T_ALL")s"

shown=$(realpath -s --relative-base=. "$OUT_DIR")
echo
echo "Built in $shown/:"
printf '  %-15s %6s  %s\n' busybox-oci/ "$(human_size "$OUT_DIR/busybox-oci")" \
  "OCI image layout, named $BUSYBOX_REF"
printf '  %-15s %6s  %s\n' busybox.sqsh "$(human_size "$OUT_DIR/busybox.sqsh")" \
  "enroot squashfs image, the same root file system"
if [ -f "$OUT_DIR/pytorch.sqsh" ]; then
  printf '  %-15s %6s  %s\n' pytorch.sqsh "$(human_size "$OUT_DIR/pytorch.sqsh")" \
    "enroot squashfs image: Debian $SUITE, python3, torch, torchrun, /workspace/train_distributed.py"
fi
cat <<EOF

Import them into a phalanx state directory (add --state-dir DIR, or set PHALANX_STATE_DIR):
  phalanx image import $shown/busybox-oci                  # as $BUSYBOX_REF
  phalanx image import $shown/busybox-oci --name busybox
  # the images the upstream Kueue samples name (their commands are busybox's sh and sleep):
  phalanx image import $shown/busybox-oci --name registry.k8s.io/e2e-test-images/agnhost:2.53
  phalanx image import $shown/busybox.sqsh --name busybox-sqsh
EOF
if [ -f "$OUT_DIR/pytorch.sqsh" ]; then
  cat <<EOF
  phalanx image import $shown/pytorch.sqsh --name pytorch
srun runs a .sqsh file without importing it:
  srun --container-image=$OUT_DIR/pytorch.sqsh torchrun ... /workspace/train_distributed.py
EOF
fi
