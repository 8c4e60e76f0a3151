package diskimage

// Tests against images made by the real tools: mkfs.ext4, mkfs.xfs,
// mkfs.btrfs and mkswap (e2fsprogs, xfsprogs, btrfs-progs, util-linux),
// sfdisk (fdisk package) and qemu-img/qemu-io (qemu-utils). A missing tool
// fails the test: CI installs all of them.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// tool returns the path of a required tool, looking in PATH and the sbin
// directories (which a non-login PATH may lack).
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("required tool %s not found; install e2fsprogs, xfsprogs, btrfs-progs, util-linux, fdisk and qemu-utils", name)
	return ""
}

func run(t *testing.T, stdin string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// copySparse copies the data extents of src into dst at dstOff, skipping
// holes (lseek SEEK_DATA/SEEK_HOLE), so that a mostly empty file system
// image lands in a partition without writing hundreds of MiB of zeros.
func copySparse(t *testing.T, dst string, dstOff int64, src string) {
	t.Helper()
	const seekData, seekHole = 3, 4
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for off := int64(0); ; {
		data, err := in.Seek(off, seekData)
		if err != nil {
			break // ENXIO: no data past off
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, dstOff+data), io.NewSectionReader(in, data, hole-data)); err != nil {
			t.Fatal(err)
		}
		off = hole
	}
}

type realFS struct {
	name, label, uuid string
	size              int64
	mkfs              func(t *testing.T, path string, f realFS)
}

var realFSes = []realFS{
	{name: FSExt4, label: "root-ext4", uuid: "6f1d5a2e-3c4b-4d8e-9a7f-0b1c2d3e4f50", size: 64 * mib, mkfs: func(t *testing.T, p string, f realFS) {
		run(t, "", "mkfs.ext4", "-q", "-F", "-L", f.label, "-U", f.uuid, p)
	}},
	// mkfs.xfs refuses data sections under 300 MB.
	{name: FSXFS, label: "root-xfs", uuid: "7a2e6b3f-4d5c-4e9f-8b0a-1c2d3e4f5061", size: 320 * mib, mkfs: func(t *testing.T, p string, f realFS) {
		run(t, "", "mkfs.xfs", "-q", "-f", "-L", f.label, "-m", "uuid="+f.uuid, p)
	}},
	{name: FSBtrfs, label: "root-btrfs", uuid: "8b3f7c40-5e6d-4fa0-9c1b-2d3e4f506172", size: 128 * mib, mkfs: func(t *testing.T, p string, f realFS) {
		run(t, "", "mkfs.btrfs", "-q", "-f", "-L", f.label, "-U", f.uuid, p)
	}},
}

// sfdiskPart is one partition as "sfdisk --json" lists it.
type sfdiskPart struct {
	Node  string `json:"node"`
	Start int64  `json:"start"`
	Size  int64  `json:"size"`
	Type  string `json:"type"`
}

func sfdiskList(t *testing.T, disk string) []sfdiskPart {
	t.Helper()
	var out struct {
		PartitionTable struct {
			Partitions []sfdiskPart `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(run(t, "", "sfdisk", "--json", disk), &out); err != nil {
		t.Fatal(err)
	}
	return out.PartitionTable.Partitions
}

const (
	swapSectors = 8192  // 4 MiB swap, logical partition of the MBR disks
	lvmSectors  = 16384 // 8 MiB LVM partition of the GPT disks
)

// buildDisk makes a raw disk image holding the file system image fsImg in
// the given layout and returns its path and size.
//
//	none: the file system is the whole disk.
//	mbr:  p1 = file system, p2 = extended, p5 = swap (mkswap).
//	gpt:  p1 = 1 MiB BIOS boot (empty), p2 = file system, p3 = LVM
//	      (a hand-written LVM2 label).
func buildDisk(t *testing.T, dir, layout, fsImg string, fsSize int64) (string, int64) {
	t.Helper()
	disk := filepath.Join(dir, layout+".img")
	if layout == "none" {
		return fsImg, fsSize
	}
	fsSectors := fsSize / 512
	size := 2*mib + fsSize + 2*lvmSectors*512 + 2*mib
	sparseFile(t, disk, size)
	switch layout {
	case "mbr":
		ext := 2048 + fsSectors
		script := fmt.Sprintf("label: dos\nstart=2048, size=%d, type=83\nstart=%d, size=%d, type=5\nstart=%d, size=%d, type=82\n",
			fsSectors, ext, 2*swapSectors, ext+2048, swapSectors)
		run(t, script, "sfdisk", "-q", "--no-reread", "--no-tell-kernel", disk)
		copySparse(t, disk, 2048*512, fsImg)
		swap := filepath.Join(dir, "swap.img")
		sparseFile(t, swap, swapSectors*512)
		run(t, "", "mkswap", "-q", swap)
		copySparse(t, disk, (ext+2048)*512, swap)
	case "gpt":
		script := fmt.Sprintf("label: gpt\nstart=2048, size=2048, type=%s, name=bios\nstart=4096, size=%d, type=%s, name=root\nstart=%d, size=%d, type=%s, name=lvm\n",
			guidBIOSBoot, fsSectors, guidLinux, 4096+fsSectors, lvmSectors, guidLVM)
		run(t, script, "sfdisk", "-q", "--no-reread", "--no-tell-kernel", disk)
		copySparse(t, disk, 4096*512, fsImg)
		label := make([]byte, 512)
		copy(label, "LABELONE")
		copy(label[24:], "LVM2 001")
		f, err := os.OpenFile(disk, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(label, (4096+fsSectors)*512+512); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return disk, size
}

func TestRealImages(t *testing.T) {
	dir := t.TempDir()
	for _, fs := range realFSes {
		fsImg := filepath.Join(dir, fs.name+".fs")
		sparseFile(t, fsImg, fs.size)
		fs.mkfs(t, fsImg, fs)
		// blkid agrees on what mkfs wrote, so the expectations below
		// are about the image, not about this package.
		blk := string(run(t, "", "blkid", "-p", "-o", "export", fsImg))
		for _, kv := range []string{"TYPE=" + fs.name, "UUID=" + fs.uuid, "LABEL=" + fs.label} {
			if !strings.Contains(blk, kv+"\n") {
				t.Fatalf("blkid on %s: want %s in\n%s", fs.name, kv, blk)
			}
		}
		for _, layout := range []string{"none", "mbr", "gpt"} {
			sub := filepath.Join(dir, fs.name+"-"+layout)
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			raw, size := buildDisk(t, sub, layout, fsImg, fs.size)
			var parts []sfdiskPart
			if layout != "none" {
				parts = sfdiskList(t, raw)
			}
			qcow := filepath.Join(sub, "disk.qcow2")
			run(t, "", "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, qcow)
			for _, img := range []struct{ format, path string }{{FormatRaw, raw}, {FormatQcow2, qcow}} {
				t.Run(fs.name+"/"+layout+"/"+img.format, func(t *testing.T) {
					info, err := ProbeFile(img.path)
					if err != nil {
						t.Fatal(err)
					}
					checkRealInfo(t, info, fs, layout, img.format, size, parts)
					if img.format == FormatQcow2 {
						checkRealMetadata(t, img.path, false)
					}
				})
			}
		}
	}
}

func checkRealInfo(t *testing.T, info *Info, fs realFS, layout, format string, size int64, parts []sfdiskPart) {
	t.Helper()
	if info.Format != format || info.VirtualSize != size {
		t.Errorf("format %q virtual size %d, want %q %d", info.Format, info.VirtualSize, format, size)
	}
	if format == FormatQcow2 && (info.Qcow2Version != 3 || info.ClusterSize != 64<<10 || info.BackingFile != "") {
		t.Errorf("qcow2 version %d cluster %d backing %q", info.Qcow2Version, info.ClusterSize, info.BackingFile)
	}
	if info.GuestFS != fs.name || info.FSLabel != fs.label || info.FSUUID != fs.uuid || info.Reason != "" {
		t.Errorf("guest fs %q label %q uuid %q reason %q, want %q %q %q", info.GuestFS, info.FSLabel, info.FSUUID, info.Reason, fs.name, fs.label, fs.uuid)
	}
	wantTable, wantPart := map[string]string{"none": TableNone, "mbr": TableMBR, "gpt": TableGPT}[layout], map[string]int{"none": 0, "mbr": 1, "gpt": 2}[layout]
	if info.PartitionTable != wantTable || info.GuestFSPartition != wantPart || len(info.Notes) != 0 {
		t.Errorf("table %q guest partition %d notes %q, want %q %d none", info.PartitionTable, info.GuestFSPartition, info.Notes, wantTable, wantPart)
	}
	if len(info.Partitions) != len(parts) {
		t.Fatalf("%d partitions, sfdisk lists %d: %+v", len(info.Partitions), len(parts), info.Partitions)
	}
	for i, sp := range parts {
		p := info.Partitions[i]
		idx, _ := strconv.Atoi(sp.Node[strings.LastIndexAny(sp.Node, "img")+1:])
		typ := strings.ToLower(sp.Type)
		if len(typ) <= 2 {
			typ = fmt.Sprintf("0x%02s", typ)
		}
		if p.Index != idx || p.Start != sp.Start*512 || p.Size != sp.Size*512 || p.Type != typ {
			t.Errorf("partition %d = %d@%d+%d %s, sfdisk: %d@%d+%d %s", i, p.Index, p.Start, p.Size, p.Type, idx, sp.Start*512, sp.Size*512, typ)
		}
		want := map[string][2]string{
			"83": {fs.name, ""}, "5": {FSUnknown, reasonExtended}, "82": {FSUnknown, ReasonSwap},
			guidBIOSBoot: {FSUnknown, ReasonNoFS}, guidLinux: {fs.name, ""}, guidLVM: {FSUnknown, ReasonLVM2},
		}[strings.ToLower(sp.Type)]
		if p.FS != want[0] || p.Reason != want[1] {
			t.Errorf("partition %d: fs %q reason %q, want %q %q", p.Index, p.FS, p.Reason, want[0], want[1])
		}
	}
}

// qemuCheck returns "qemu-img check" facts about a qcow2 image.
func qemuCheck(t *testing.T, path string) (end int64) {
	t.Helper()
	var c struct {
		End    int64 `json:"image-end-offset"`
		Errors int   `json:"check-errors"`
		Leaks  int   `json:"leaks"`
		Corr   int   `json:"corruptions"`
	}
	if err := json.Unmarshal(run(t, "", "qemu-img", "check", "--output=json", path), &c); err != nil {
		t.Fatal(err)
	}
	if c.Errors != 0 || c.Leaks != 0 || c.Corr != 0 {
		t.Fatalf("qemu-img check %s: %+v", path, c)
	}
	return c.End
}

// qemuDataClusters returns the host clusters holding guest data, from
// "qemu-img map" (entries with a host offset).
func qemuDataClusters(t *testing.T, path string, cs int64) map[int64]bool {
	t.Helper()
	var m []struct {
		Length int64  `json:"length"`
		Offset *int64 `json:"offset"`
		Depth  int    `json:"depth"`
	}
	if err := json.Unmarshal(run(t, "", "qemu-img", "map", "--output=json", path), &m); err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	for _, e := range m {
		if e.Offset == nil || e.Depth != 0 {
			continue
		}
		for c := *e.Offset / cs; c*cs < *e.Offset+e.Length; c++ {
			out[c] = true
		}
	}
	return out
}

// refcounted returns the clusters with a non-zero refcount, read straight
// from the refcount structures (16-bit refcounts, the qemu-img default).
func refcounted(t *testing.T, img []byte) map[int64]bool {
	t.Helper()
	be := binary.BigEndian
	if be.Uint32(img[4:]) == 3 && be.Uint32(img[96:]) != 4 {
		t.Fatalf("refcount_order %d, test expects 4", be.Uint32(img[96:]))
	}
	cs := int64(1) << be.Uint32(img[20:])
	rt := int64(be.Uint64(img[48:]))
	out := map[int64]bool{}
	for i := int64(0); i < int64(be.Uint32(img[56:]))*cs/8; i++ {
		blk := int64(be.Uint64(img[rt+8*i:]) &^ 0x1ff)
		if blk == 0 {
			continue
		}
		for j := int64(0); j < cs/2; j++ {
			if be.Uint16(img[blk+2*j:]) != 0 {
				out[i*(cs/2)+j] = true
			}
		}
	}
	return out
}

// checkRealMetadata checks Qcow2Metadata against QEMU's view of the image:
// every metadata cluster is allocated, no guest data cluster is metadata,
// and (unless other allocations such as snapshot-only data or compressed
// clusters exist) metadata plus data is exactly every allocated cluster.
func checkRealMetadata(t *testing.T, path string, partial bool) *Qcow2Layout {
	t.Helper()
	qemuCheck(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Qcow2MetadataFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Truncated || l.Skipped != 0 {
		t.Errorf("truncated %v skipped %d", l.Truncated, l.Skipped)
	}
	cs := l.ClusterSize
	alloc := refcounted(t, data)
	dataCl := qemuDataClusters(t, path, cs)
	meta := map[int64]bool{}
	for _, r := range l.Ranges {
		for c := r.Start / cs; c < r.End/cs; c++ {
			meta[c] = true
			if !alloc[c] {
				t.Errorf("metadata cluster %d (%#x) has refcount 0", c, c*cs)
			}
			if dataCl[c] {
				t.Errorf("cluster %d (%#x) is both guest data and metadata", c, c*cs)
			}
		}
	}
	if !partial {
		for c := range alloc {
			if !meta[c] && !dataCl[c] {
				t.Errorf("allocated cluster %d (%#x) is neither metadata nor guest data", c, c*cs)
			}
		}
	}
	return l
}

func TestRealExtVariants(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		want string
		mkfs []string
	}{
		{FSExt2, []string{"mkfs.ext2"}},
		{FSExt3, []string{"mkfs.ext3"}},
		{FSExt4, []string{"mkfs.ext4", "-O", "^has_journal"}},
	} {
		p := filepath.Join(dir, tc.want+".img")
		sparseFile(t, p, 32*mib)
		run(t, "", tc.mkfs[0], append(append([]string{"-q", "-F"}, tc.mkfs[1:]...), "-L", "x\"y", p)...)
		info, err := ProbeFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.GuestFS != tc.want || info.FSLabel != "x\"y" {
			t.Errorf("%v: guest fs %q label %q, want %q", tc.mkfs, info.GuestFS, info.FSLabel, tc.want)
		}
	}
}

// TestRealQcow2Reader reads qcow2 images written by qemu-img and qemu-io in
// every layout the reader supports and compares the guest contents with
// QEMU's own conversion back to raw.
func TestRealQcow2Reader(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	guest := guestPattern(6*mib, 4096, 42)
	if err := os.WriteFile(src, guest, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		io   bool // modify with qemu-io afterwards (zero clusters, discards, new writes)
	}{
		{"v2", []string{"-o", "compat=0.10"}, true},
		{"v3", nil, true},
		{"512-byte-clusters", []string{"-o", "cluster_size=512"}, true},
		{"2MiB-clusters", []string{"-o", "cluster_size=2M"}, true},
		{"extended-l2", []string{"-o", "extended_l2=on"}, true},
		{"extended-l2-32k", []string{"-o", "extended_l2=on,cluster_size=32k"}, true},
		{"compressed", []string{"-c"}, false},
		{"compressed-4k", []string{"-c", "-o", "cluster_size=4096"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(dir, tc.name+".qcow2")
			run(t, "", "qemu-img", append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, tc.args...), src, img)...)
			if tc.io {
				run(t, "", "qemu-io", "-f", "qcow2",
					"-c", "write -z 0 192k", // zero clusters (v3) / zeroed data (v2)
					"-c", "discard 1m 256k",
					"-c", "write -P 0x5a 1100k 3000", // partial cluster writes
					"-c", "write -P 0xa5 5m 64k", // where the source had zeros
					img)
			}
			ref := filepath.Join(dir, tc.name+".raw")
			run(t, "", "qemu-img", "convert", "-f", "qcow2", "-O", "raw", img, ref)
			want, err := os.ReadFile(ref)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			r, err := NewQcow2Reader(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			if r.Size() != int64(len(want)) {
				t.Fatalf("size %d, qemu-img says %d", r.Size(), len(want))
			}
			got := make([]byte, len(want))
			if _, err := r.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("guest contents differ from qemu-img convert at byte %d", i)
			}
			// Unaligned reads across cluster boundaries.
			rng := rand.New(rand.NewPCG(1, 2))
			for range 100 {
				off, n := rng.Int64N(int64(len(want))), rng.IntN(200<<10)+1
				buf := make([]byte, n)
				m, _ := r.ReadAt(buf, off)
				if !bytes.Equal(buf[:m], want[off:off+int64(m)]) || off+int64(m) != min(off+int64(n), int64(len(want))) {
					t.Fatalf("ReadAt(%d bytes at %d) differs", n, off)
				}
			}
			checkRealMetadata(t, img, strings.HasPrefix(tc.name, "compressed"))
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func TestRealQcow2Backing(t *testing.T) {
	dir := t.TempDir()
	fs := realFSes[0] // ext4
	raw := filepath.Join(dir, "base.raw")
	sparseFile(t, raw, fs.size)
	fs.mkfs(t, raw, fs)
	base := filepath.Join(dir, "base.qcow2")
	run(t, "", "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, base)
	overlay := filepath.Join(dir, "overlay.qcow2")
	run(t, "", "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", overlay)
	run(t, "", "qemu-io", "-f", "qcow2", "-c", "write -P 0x11 8m 64k", overlay)

	info, err := ProbeFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if info.BackingFile != base || info.BackingFormat != "qcow2" || info.VirtualSize != fs.size {
		t.Errorf("backing %q format %q size %d", info.BackingFile, info.BackingFormat, info.VirtualSize)
	}
	if info.GuestFS != FSUnknown || !strings.Contains(info.Reason, "backing file not opened") {
		t.Errorf("guest fs %q reason %q", info.GuestFS, info.Reason)
	}
	checkRealMetadata(t, overlay, false)

	// Once the overlay holds everything (rebase onto nothing copies the
	// backing data in), the file system is found.
	run(t, "", "qemu-img", "rebase", "-f", "qcow2", "-b", "", overlay)
	info, err = ProbeFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if info.BackingFile != "" || info.GuestFS != FSExt4 || info.FSUUID != fs.uuid {
		t.Errorf("after rebase: backing %q guest fs %q uuid %q reason %q", info.BackingFile, info.GuestFS, info.FSUUID, info.Reason)
	}
}

func TestRealQcow2EncryptedAndDataFile(t *testing.T) {
	dir := t.TempDir()
	enc := filepath.Join(dir, "enc.qcow2")
	// qemu-img times its PBKDF2 on CPU usage and gives up ("Unable to get
	// accurate CPU usage") when a loaded machine reports none: try again.
	args := []string{"create", "-q", "--object", "secret,id=sec0,data=fspair-test",
		"-f", "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10", enc, "64M"}
	for i := 0; ; i++ {
		out, err := exec.Command("qemu-img", args...).CombinedOutput()
		if err == nil {
			break
		}
		if i == 4 || !strings.Contains(string(out), "accurate CPU usage") {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	info, err := ProbeFile(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Encrypted || info.Reason != ReasonEncQcow2 || info.VirtualSize != 64*mib {
		t.Errorf("encrypted: %+v", info)
	}
	// The LUKS header clusters are metadata, and an empty image holds
	// nothing else: the metadata is exactly the allocated clusters.
	// (qemu-img check would need the key, so read the refcounts here.)
	raw, err := os.ReadFile(enc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Qcow2Metadata(bytes.NewReader(raw), int64(len(raw)), 0)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[int64]bool{}
	for _, r := range l.Ranges {
		for c := r.Start / l.ClusterSize; c < r.End/l.ClusterSize; c++ {
			meta[c] = true
		}
	}
	alloc := refcounted(t, raw)
	if len(meta) != len(alloc) || len(alloc) < 4 {
		t.Errorf("%d metadata clusters, %d allocated", len(meta), len(alloc))
	}
	for c := range alloc {
		if !meta[c] {
			t.Errorf("allocated cluster %d is not metadata", c)
		}
	}

	df := filepath.Join(dir, "ext.qcow2")
	data := filepath.Join(dir, "ext.data")
	run(t, "", "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+data, df, "64M")
	info, err = ProbeFile(df)
	if err != nil {
		t.Fatal(err)
	}
	if info.DataFile != data || !strings.Contains(info.Reason, "external data file") {
		t.Errorf("data file %q reason %q", info.DataFile, info.Reason)
	}
}

func TestRealQcow2SnapshotsAndBitmaps(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	if err := os.WriteFile(src, guestPattern(4*mib, 64<<10, 9), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.qcow2")
	run(t, "", "qemu-img", "convert", "-f", "raw", "-O", "qcow2", src, img)
	before := checkRealMetadata(t, img, false)

	run(t, "", "qemu-img", "snapshot", "-c", "s1", img)
	run(t, "", "qemu-img", "bitmap", "--add", img, "b0")
	// Writes after the snapshot copy L2 tables and data clusters and
	// dirty the bitmap, which is stored with its data on close.
	run(t, "", "qemu-io", "-f", "qcow2", "-c", "write -P 0x77 0 128k", "-c", "write -P 0x78 3m 64k", img)
	after := checkRealMetadata(t, img, true)

	// The snapshot table, snapshot L1 table, bitmap directory, bitmap
	// table, bitmap data and the copied L2 tables are all new metadata.
	count := func(l *Qcow2Layout) (n int64) {
		for _, r := range l.Ranges {
			n += (r.End - r.Start) / l.ClusterSize
		}
		return n
	}
	if count(after) < count(before)+5 {
		t.Errorf("metadata grew from %d to %d clusters, want at least 5 more", count(before), count(after))
	}
	info, err := ProbeFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != FormatQcow2 || info.Reason != ReasonNoFS {
		t.Errorf("%+v", info)
	}
}

func TestProbeFileErrors(t *testing.T) {
	if _, err := ProbeFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "probe image") {
		t.Errorf("missing file: %v", err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	run(t, "", "mkfifo", fifo)
	if _, err := ProbeFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("fifo: %v", err)
	}
}
