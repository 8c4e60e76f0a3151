// Package obj holds fspair's BPF programs (the C sources in the parent
// directory) compiled by bpf2go into the generated files beside this one.
// They are committed, so building the exporter needs no clang; run
// `make generate` after changing any .c or .h file in bpf/.
package obj

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type counters -type op_counters -type image_ref -type seek_state -type image_config -type format_cluster -type registration -type inflight Disk ../disk.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type device_counters -type image_device_counters Host ../host.bpf.c
