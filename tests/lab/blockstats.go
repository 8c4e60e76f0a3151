package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// BlockIOStats are the counters QEMU keeps per block node (QAPI
// BlockDeviceStats in qapi/block-core.json). Operations are requests;
// merged counts requests QEMU merged into others before issuing them.
type BlockIOStats struct {
	RdBytes         uint64 `json:"rd_bytes"`
	WrBytes         uint64 `json:"wr_bytes"`
	UnmapBytes      uint64 `json:"unmap_bytes"`
	RdOperations    uint64 `json:"rd_operations"`
	WrOperations    uint64 `json:"wr_operations"`
	FlushOperations uint64 `json:"flush_operations"`
	UnmapOperations uint64 `json:"unmap_operations"`
	RdMerged        uint64 `json:"rd_merged"`
	WrMerged        uint64 `json:"wr_merged"`
	UnmapMerged     uint64 `json:"unmap_merged"`
	RdTotalTimeNs   uint64 `json:"rd_total_time_ns"`
	WrTotalTimeNs   uint64 `json:"wr_total_time_ns"`
	FlushTotalTime  uint64 `json:"flush_total_time_ns"`
	UnmapTotalTime  uint64 `json:"unmap_total_time_ns"`
	WrHighestOffset uint64 `json:"wr_highest_offset"`
	FailedRd        uint64 `json:"failed_rd_operations"`
	FailedWr        uint64 `json:"failed_wr_operations"`
	FailedFlush     uint64 `json:"failed_flush_operations"`
	FailedUnmap     uint64 `json:"failed_unmap_operations"`
}

// BlockNodeStats are the statistics of one block node.
//
// QEMU 7.2 accounts requests only where a device submits them (the block
// backend): a node's own counters stay zero except wr_highest_offset. The
// file driver's discard counters (DriverSpecific) are the one record of
// what reached the image file below the format layer.
type BlockNodeStats struct {
	NodeName       string           `json:"node-name"`
	Stats          BlockIOStats     `json:"stats"`
	DriverSpecific *FileDriverStats `json:"driver-specific,omitempty"`
}

// FileDriverStats are the file protocol driver's statistics
// (BlockStatsSpecificFile in qapi/block-core.json): discards the host file
// system accepted or refused. Guest discards reach the file only with
// discard=unmap.
type FileDriverStats struct {
	Driver          string `json:"driver"`
	DiscardNbOK     uint64 `json:"discard-nb-ok"`
	DiscardNbFailed uint64 `json:"discard-nb-failed"`
	DiscardBytesOK  uint64 `json:"discard-bytes-ok"`
}

// BlockStats is one entry of query-blockstats: what the guest device asked
// of its top node (the format layer for qcow2 and raw) and, as Parent, the
// node below it, normally the file node that does the host I/O (see
// BlockNodeStats for what QEMU counts there).
type BlockStats struct {
	ID     string          // device id (the qdev id, e.g. "vd1"), or the drive name when no device is attached
	Device string          // drive (block backend) name; empty for hot-plugged disks
	QDev   string          // qdev path, e.g. /machine/peripheral/vd1/virtio-backend
	Node   BlockNodeStats  // the top node
	Parent *BlockNodeStats // its child ("file"), if any
}

// parseBlockStats decodes a query-blockstats reply into entries keyed by ID.
func parseBlockStats(raw json.RawMessage) (map[string]BlockStats, error) {
	var entries []struct {
		Device   string           `json:"device"`
		QDev     string           `json:"qdev"`
		NodeName string           `json:"node-name"`
		Stats    BlockIOStats     `json:"stats"`
		Driver   *FileDriverStats `json:"driver-specific"`
		Parent   *BlockNodeStats  `json:"parent"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("decode query-blockstats: %w", err)
	}
	out := make(map[string]BlockStats, len(entries))
	for _, e := range entries {
		id := qdevID(e.QDev)
		if id == "" {
			id = e.Device
		}
		if id == "" {
			id = e.NodeName
		}
		out[id] = BlockStats{
			ID:     id,
			Device: e.Device,
			QDev:   e.QDev,
			Node:   BlockNodeStats{NodeName: e.NodeName, Stats: e.Stats, DriverSpecific: e.Driver},
			Parent: e.Parent,
		}
	}
	return out, nil
}

// qdevID extracts the device id from a qdev path. Devices given an id live
// at /machine/peripheral/<id>; virtio devices report their backend child
// below it.
func qdevID(path string) string {
	const prefix = "/machine/peripheral/"
	if !strings.HasPrefix(path, prefix) {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(path, prefix), "/")
	return id
}

// BlockStats returns QEMU's block statistics keyed by device id.
func (vm *VM) BlockStats(ctx context.Context) (map[string]BlockStats, error) {
	raw, err := vm.QMP(ctx, "query-blockstats", nil)
	if err != nil {
		return nil, fmt.Errorf("query block stats of %s: %w", vm.Name, err)
	}
	return parseBlockStats(raw)
}

// BlockStats returns QEMU's block statistics of the domain's disks keyed
// by image file, asked of its QEMU through libvirt (virsh
// qemu-monitor-command: query-blockstats, and query-block for which device
// holds which file). libvirt marks the domain tainted by it, which is no
// matter for a lab domain.
func (d *Domain) BlockStats(ctx context.Context) (map[string]BlockStats, error) {
	ask := func(cmd string) (json.RawMessage, error) {
		out, err := Virsh(ctx, "qemu-monitor-command", d.Name, `{"execute":"`+cmd+`"}`)
		if err != nil {
			return nil, err
		}
		var reply struct {
			Return json.RawMessage `json:"return"`
		}
		if err := json.Unmarshal([]byte(out), &reply); err != nil || reply.Return == nil {
			return nil, fmt.Errorf("%s of domain %s: unexpected reply %q", cmd, d.Name, truncate(out, 200))
		}
		return reply.Return, nil
	}
	raw, err := ask("query-blockstats")
	if err != nil {
		return nil, err
	}
	byID, err := parseBlockStats(raw)
	if err != nil {
		return nil, err
	}
	raw, err = ask("query-block")
	if err != nil {
		return nil, err
	}
	var block []struct {
		Device   string `json:"device"`
		QDev     string `json:"qdev"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	if err := json.Unmarshal(raw, &block); err != nil {
		return nil, fmt.Errorf("decode query-block of domain %s: %w", d.Name, err)
	}
	out := map[string]BlockStats{}
	for _, b := range block {
		if b.Inserted == nil {
			continue
		}
		id := qdevID(b.QDev)
		if id == "" {
			id = b.Device
		}
		if s, ok := byID[id]; ok {
			out[b.Inserted.File] = s
		}
	}
	return out, nil
}

// PID returns the process id of the domain's QEMU from the QEMU driver's
// pid file, 0 if unknown.
func (d *Domain) PID() int { return readPIDFile(filepath.Join(libvirtPIDDir, d.Name+".pid")) }
