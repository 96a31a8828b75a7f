#!/usr/bin/env bash
# cformers launch: the mpirun / srun command it prints for a local run, a hostfile, a Slurm
# allocation and the netsim cluster (--dry-run), a real 2-rank run and its exit status,
# and misuse exiting 2 with a reason.
. "$(dirname "$0")/lib_cli.sh"
exe=$(readlink -f "$bin")
cores=$(nproc) # the CPUs this process may use, as launch counts them
root=""
[ "$(id -u)" = 0 ] && root=" --allow-run-as-root"
unset SLURM_JOB_ID SLURM_CPUS_PER_TASK SLURM_JOB_NUM_NODES $(compgen -e | grep '^CFORMERS_')
envx="" # the variables launch passes on by name, where set, in its order
for v in PATH LD_LIBRARY_PATH TMPDIR ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
    [ -n "${!v+set}" ] && envx="$envx -x $v"
done

# The binding launch must choose for ranks x threads on one host of $cores cores.
binding() {
    if [ $(($1 * $2)) -le "$cores" ]; then echo "--map-by slot:PE=$2 --bind-to core"; else echo "--bind-to none --oversubscribe"; fi
}

# dry DESC WANT ARGS...: `launch ARGS... --dry-run` prints exactly WANT.
dry() {
    local what="$1" want="$2"; shift 2
    check "$what" 0 "$bin" launch --dry-run "$@"
    [ "$(cat "$tmp/out")" = "$want" ] || fail_because "$what: printed '$(cat "$tmp/out")', want '$want'"
}

tail_x="-x CFORMERS_THREADS=1$envx $exe train --config tiny_shakespeare"
dry "local, 2 ranks" "mpirun -n 2$root $(binding 2 1) $tail_x" -n 2 --threads-per-rank 1 -- train --config tiny_shakespeare
n=$((cores + 1))
dry "local, more ranks than cores" "mpirun -n $n$root --bind-to none --oversubscribe $tail_x" \
    -n $n -- train --config tiny_shakespeare
dry "--mpirun" "/opt/mpi/bin/mpirun -n 1$root $(binding 1 "$cores") -x CFORMERS_THREADS=$cores$envx $exe config list" \
    -n 1 --mpirun /opt/mpi/bin/mpirun -- config list

# The environment: CFORMERS_* passed by name, CFORMERS_THREADS replaced by the share.
check "environment" 0 env CFORMERS_THREADS=7 CFORMERS_FOO=bar "$bin" launch -n 2 --threads-per-rank 1 --dry-run -- config list
stdout_has "CFORMERS_FOO passed" " -x CFORMERS_FOO "
stdout_has "threads set" " -x CFORMERS_THREADS=1 "
grep -q "CFORMERS_THREADS=7" "$tmp/out" && fail_because "the caller's CFORMERS_THREADS reached the ranks"

# Words a shell would split or expand come out quoted, and read back as they were.
check "quoting" 0 "$bin" launch -n 2 --dry-run -- train --config "my cfg's \$dir.yaml"
eval "set -- $(cat "$tmp/out")"
[ "${*: -1}" = "my cfg's \$dir.yaml" ] || fail_because "quoting: read back as '${*: -1}' from $(cat "$tmp/out")"

# A hostfile: 2 slots on alpha, beta's count is its cores (taken as this machine's).
printf 'alpha slots=2 # two ranks\n\n# a comment\nbeta\n' >"$tmp/hosts"
dry "hostfile" "mpirun -n 3 --hostfile $tmp/hosts$root $(binding 2 1) $tail_x" \
    -n 3 --hostfile "$tmp/hosts" --threads-per-rank 1 -- train --config tiny_shakespeare
n=$((2 + cores + 1))
dry "hostfile, more ranks than slots" "mpirun -n $n --hostfile $tmp/hosts$root --bind-to none --oversubscribe $tail_x" \
    -n $n --hostfile "$tmp/hosts" --threads-per-rank 1 -- train --config tiny_shakespeare

# Slurm: srun places the ranks; a hostfile or --launcher mpirun still means mpirun.
export SLURM_JOB_ID=4242
dry "Slurm" "srun --ntasks 4 --cpus-per-task 3 --export=ALL,CFORMERS_THREADS=3 $exe train --config x" \
    -n 4 --threads-per-rank 3 -- train --config x
SLURM_CPUS_PER_TASK=8 dry "Slurm, cpus per task" \
    "srun --ntasks 2 --cpus-per-task 8 --export=ALL,CFORMERS_THREADS=8 $exe train --config x" -n 2 -- train --config x
dry "Slurm, --launcher mpirun" "mpirun -n 2$root $(binding 2 1) -x CFORMERS_THREADS=1$envx $exe config list" \
    -n 2 --threads-per-rank 1 --launcher mpirun -- config list
check "srun with --hostfile" 2 "$bin" launch -n 2 --launcher srun --hostfile "$tmp/hosts" -- config list
stderr_has "srun with --hostfile message" "go with mpirun, not srun"
unset SLURM_JOB_ID

# The netsim cluster's files, as scripts/netsim.sh up writes them (no namespace needed).
mkdir "$tmp/netsim"
printf '%s\n' ip netns exec cfn0 >"$tmp/netsim/mpirun.prefix"
printf '%s\n' --hostfile "$tmp/netsim/hostfile" --bind-to none >"$tmp/netsim/mpirun.args"
printf 'cfn0 slots=1\ncfn1 slots=1\n' >"$tmp/netsim/hostfile"
netsim_x="-x CFORMERS_THREADS=$((cores / 2 > 0 ? cores / 2 : 1)) -x CFORMERS_NETSIM_DIR$envx"
CFORMERS_NETSIM_DIR="$tmp/netsim" dry "netsim" \
    "ip netns exec cfn0 mpirun -n 2 --hostfile $tmp/netsim/hostfile --bind-to none$root --oversubscribe $netsim_x $exe config list" \
    -n 2 --netsim -- config list
CFORMERS_NETSIM_DIR="$tmp/nowhere" check "netsim not up" 1 "$bin" launch -n 2 --netsim -- config list
stderr_has "netsim not up message" "run scripts/netsim.sh up first"

# Misuse.
check "no -n" 2 "$bin" launch -- config list
stderr_has "no -n message" "-n RANKS is required"
check "-n 0" 2 "$bin" launch -n 0 -- config list
check "no command" 2 "$bin" launch -n 2
stderr_has "no command message" "the command to run goes after --"
check "nothing after --" 2 "$bin" launch -n 2 --
check "no --" 2 "$bin" launch -n 2 config list
stderr_has "no -- message" "'config': the command to run goes after --"
check "unknown option" 2 "$bin" launch -n 2 --frobnicate -- config list
stderr_has "unknown option message" "unknown option '--frobnicate'"
check "bad threads" 2 "$bin" launch -n 2 --threads-per-rank x -- config list
check "missing value" 2 "$bin" launch -n
check "bad launcher" 2 "$bin" launch -n 2 --launcher ssh -- config list
check "hostfile and netsim" 2 "$bin" launch -n 2 --hostfile "$tmp/hosts" --netsim -- config list
check "unreadable hostfile" 2 "$bin" launch -n 2 --hostfile "$tmp/none" -- config list
stderr_has "unreadable hostfile message" "cannot read"
printf 'alpha slots=many\n' >"$tmp/bad_hosts"
check "bad slots" 2 "$bin" launch -n 2 --hostfile "$tmp/bad_hosts" -- config list
check "launch launch" 2 "$bin" launch -n 2 -- launch -n 2 -- config list
check "--help after -- is the command's" 0 "$bin" launch -n 1 --dry-run -- train --help
stdout_has "--help after --" "train --help"

# A real job: 2 ranks of 3 threads (more than a small machine's cores: launch must
# oversubscribe), each saying its thread count; the job's exit status is launch's.
if ! command -v mpirun >/dev/null; then
    echo "SKIP: no mpirun, no real run"
else
    check "real run" 0 "$bin" launch -n 2 --threads-per-rank 3 -- bench gemm --m 16 --n 16 --k 16 --reps 1
    [ "$(grep -c "3 threads" "$tmp/out")" = 2 ] || fail_because "real run: two ranks of 3 threads: $(cat "$tmp/out")"
    stderr_has "real run prints its command" "mpirun -n 2"
    check "a failing job's status" 2 "$bin" launch -n 2 -- frobnicate
    stderr_has "the ranks' reason" "unknown command 'frobnicate'"
    # mpirun gives ranks a pseudo-terminal, but launch's output here is a file: plain
    # progress lines, no carriage return or escape codes rewriting them in place.
    tiny_run --steps 3 --output_dir="$tmp/progress"
    check "training, output redirected" 0 env ASAN_OPTIONS="$mpi_asan_options" "$bin" launch -n 1 --threads-per-rank 1 -- train "${tiny[@]}"
    grep -q "^step 3/" "$tmp/out" || fail_because "no plain progress line: $(cat "$tmp/out")"
    ! grep -q $'[\r\033]' "$tmp/out" "$tmp/err" || fail_because "progress codes in redirected output: $(cat -A "$tmp/out" | head -5)"
fi
finish "cli launch"
