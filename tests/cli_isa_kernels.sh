#!/usr/bin/env bash
# ISA decisions live in the kernel contexts (src/kernels/context, issue 36): no file
# outside them and core/cpu.c (which detects the CPU) asks which ISA or bf16 unit is
# active or switches on it, so a new ISA cannot fall silently to another file's default.
# CFORMERS_ISA picks the context (scalar/portable, avx2 on a machine that has it), and a
# bad value is a one-line error with exit 2 from the CLI, never an exit inside the library.
. "$(dirname "$0")/lib_cli.sh"

allowed='^src/(kernels/context/|core/cpu\.c:)'
for pattern in 'cf_isa_active *\(' 'cf_has_avx512_bf16 *\(' 'switch *\(cf_isa' 'switch *\(cf_bf16_unit_active'; do
    sites=$(cd "$src" && grep -rnE "$pattern" src | grep -vE "$allowed")
    [ -z "$sites" ] || fail_because "ISA asked outside the kernel contexts ($pattern):
$sites"
done
# The library reports a bad CFORMERS_ISA; it does not end the process itself.
sites=$(cd "$src" && grep -rnE '\b(exit|abort) *\(' src/core/cpu.c src/kernels/context)
[ -z "$sites" ] || fail_because "exit/abort in the CPU detection or the kernel contexts:
$sites"

check "--version" 0 "$bin" --version
stdout_has "--version names the kernel context" "kernels on this CPU:"
check "CFORMERS_ISA=portable" 0 env CFORMERS_ISA=portable "$bin" --version
stdout_has "portable context" "kernels on this CPU: portable"
check "CFORMERS_ISA=scalar" 0 env CFORMERS_ISA=scalar "$bin" --version
stdout_has "scalar is the portable context" "kernels on this CPU: portable"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    check "CFORMERS_ISA=avx2" 0 env CFORMERS_ISA=avx2 "$bin" --version
    stdout_has "avx2 context" "kernels on this CPU: avx2"
fi
check "unknown CFORMERS_ISA" 2 env CFORMERS_ISA=sse9 "$bin" --version
stderr_has "unknown CFORMERS_ISA names the value" "CFORMERS_ISA=sse9 is not one of"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail_because "unknown CFORMERS_ISA: not one line: $(cat "$tmp/err")"
check "unknown CFORMERS_ISA before a subcommand" 2 env CFORMERS_ISA=sse9 "$bin" config show llama_15m
stderr_has "subcommand refused too" "CFORMERS_ISA=sse9"
if ! grep -qw avx512f /proc/cpuinfo; then
    check "CFORMERS_ISA above the CPU" 2 env CFORMERS_ISA=avx512 "$bin" --version
    stderr_has "names the best" "not supported by this CPU"
fi
finish "cli isa kernels"
