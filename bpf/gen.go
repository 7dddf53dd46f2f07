// Package bpf holds reconscope's eBPF programs and their bpf2go-generated Go bindings.
//
// The C sources are trace.bpf.c and the headers in include/. Run `make generate` to rebuild
// the committed objects (trace_x86_bpfel.o, trace_arm64_bpfel.o) and their Go files.
package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type event -type event_head -type site_config -type str_spec -type val_spec -type err_key -type err_layout -type g_key -type g_state -type exe_id -type exec_event -type event_kind -type event_flag -type site_role -type site_kind -type site_flag -type counter -type exec_flag -type slot -type call_detail_mode Trace trace.bpf.c -- -I./include
