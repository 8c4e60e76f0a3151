package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ErrNoGuestDevice is returned when no guest block device has the serial
// asked for.
var ErrNoGuestDevice = errors.New("no guest block device with that serial")

// GuestDevice returns the guest's block device (e.g. "vdb") whose virtio
// serial is serial, read from /sys/block/*/serial (virtio_blk exposes it).
func (vm *VM) GuestDevice(ctx context.Context, serial string) (string, error) {
	out, err := vm.RunOK(ctx, `for d in /sys/block/*; do [ -r "$d/serial" ] && printf '%s %s\n' "${d##*/}" "$(cat "$d/serial")"; done; true`)
	if err != nil {
		return "", fmt.Errorf("list guest block devices: %w", err)
	}
	for _, line := range strings.Split(out, "\n") {
		dev, s, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && s == serial {
			return dev, nil
		}
	}
	return "", fmt.Errorf("guest %s: serial %q: %w", vm.Name, serial, ErrNoGuestDevice)
}

// WaitGuestDevice polls GuestDevice until the device shows up or ctx ends.
func (vm *VM) WaitGuestDevice(ctx context.Context, serial string) (string, error) {
	for {
		dev, err := vm.GuestDevice(ctx, serial)
		if !errors.Is(err, ErrNoGuestDevice) {
			return dev, err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for guest device with serial %q: %w", serial, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// HotplugDisk adds a disk to the running guest with blockdev-add and
// device_add, waits until the guest kernel has it, and returns the guest's
// name for it (e.g. "vdc"). The disk's options map onto blockdev options as
// -drive would set them: cache onto cache.direct/cache.no-flush of both
// nodes and the device's write-cache, discard onto both nodes.
func (vm *VM) HotplugDisk(ctx context.Context, d DiskConfig) (string, error) {
	if err := d.normalize(); err != nil {
		return "", fmt.Errorf("hot-plug into %s: %w", vm.Name, err)
	}
	vm.mu.Lock()
	if vm.disks[d.ID] != nil && vm.disks[d.ID].plugged {
		vm.mu.Unlock()
		return "", fmt.Errorf("hot-plug into %s: disk id %s in use", vm.Name, d.ID)
	}
	vm.mu.Unlock()

	node := "node-" + d.ID
	mode := cacheModes[d.Cache]
	cache := map[string]any{"direct": mode.direct, "no-flush": mode.noFlush}
	file := map[string]any{
		"driver":    "file",
		"node-name": node + "-file",
		"filename":  d.File,
		"aio":       d.AIO,
		"cache":     cache,
		"discard":   d.Discard,
	}
	format := map[string]any{
		"driver":    d.Format,
		"node-name": node,
		"file":      file,
		"cache":     cache,
		"discard":   d.Discard,
	}
	if d.ReadOnly {
		file["read-only"] = true
		format["read-only"] = true
	}
	if _, err := vm.QMP(ctx, "blockdev-add", format); err != nil {
		return "", fmt.Errorf("hot-plug %s into %s: %w", d.ID, vm.Name, err)
	}
	dev := map[string]any{
		"driver":      "virtio-blk-pci",
		"id":          d.ID,
		"drive":       node,
		"serial":      d.Serial,
		"write-cache": onOff(mode.writeCache),
	}
	if _, err := vm.QMP(ctx, "device_add", dev); err != nil {
		_, derr := vm.QMP(context.Background(), "blockdev-del", map[string]any{"node-name": node})
		return "", errors.Join(fmt.Errorf("hot-plug %s into %s: %w", d.ID, vm.Name, err), derr)
	}
	vm.mu.Lock()
	vm.disks[d.ID] = &diskState{cfg: d, node: node, plugged: true}
	vm.mu.Unlock()

	name, err := vm.WaitGuestDevice(ctx, d.Serial)
	if err != nil {
		return "", fmt.Errorf("hot-plug %s into %s: %w", d.ID, vm.Name, err)
	}
	vm.stage("hot-plugged %s (%s) as /dev/%s", d.ID, d.File, name)
	return name, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Unplug removes disk id from the running guest: device_del, then wait for
// QEMU's DEVICE_DELETED event (which needs the guest kernel to release the
// device through ACPI hot plug), then delete the block nodes of a
// hot-plugged disk (a -drive backend goes away with its device).
func (vm *VM) Unplug(ctx context.Context, id string) error {
	vm.mu.Lock()
	ds := vm.disks[id]
	vm.mu.Unlock()
	if ds == nil || !ds.plugged {
		return fmt.Errorf("unplug %s from %s: no such disk", id, vm.Name)
	}
	mark := vm.qmp.EventMark()
	if _, err := vm.QMP(ctx, "device_del", map[string]any{"id": id}); err != nil {
		return fmt.Errorf("unplug %s from %s: %w", id, vm.Name, err)
	}
	_, err := vm.qmp.WaitEvent(ctx, mark, func(ev QMPEvent) bool {
		if ev.Event != "DEVICE_DELETED" {
			return false
		}
		var data struct {
			Device string `json:"device"`
		}
		return json.Unmarshal(ev.Data, &data) == nil && data.Device == id
	})
	if err != nil {
		return fmt.Errorf("unplug %s from %s: wait for DEVICE_DELETED: %w", id, vm.Name, err)
	}
	if ds.node != "" {
		if _, err := vm.QMP(ctx, "blockdev-del", map[string]any{"node-name": ds.node}); err != nil {
			return fmt.Errorf("unplug %s from %s: %w", id, vm.Name, err)
		}
	}
	vm.mu.Lock()
	ds.plugged = false
	vm.mu.Unlock()
	vm.stage("unplugged %s", id)
	return nil
}

// Disks returns the configurations of the disks currently plugged in.
func (vm *VM) Disks() []DiskConfig {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var out []DiskConfig
	for _, ds := range vm.disks {
		if ds.plugged {
			out = append(out, ds.cfg)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
