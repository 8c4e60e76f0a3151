// Package workload runs the four Filebench personalities of the knowledge
// base (shared/kdb/published-findings.yaml: web, mail, fileserver, rfa) as
// fio jobs inside lab guests, and turns what fspair_exporter counts on the
// guest's image file into the per-disk features a workload classifier
// uses: operation mix, randomness, synchronous writes, flushes, request
// sizes, rate, write amplification and latencies.
//
// The pieces:
//
//   - jobs/*.fio model the personalities (each file says which Filebench
//     parameters it follows and where it departs); Job returns them.
//     jobs/CLASS-NAME.fio are variants of them, the classifier's held-out
//     set (Variants).
//   - apps/CLASS-NAME.sh run real programs instead of fio (Apps: dbench
//     for the file server, safecat delivering Maildir mail, busybox httpd
//     under k6 for the web), from a read-only tools disk (AppsDisk); they
//     are held out from the classifier too.
//   - Mount, Prepare and Run drive a workload in a running guest on a guest
//     file system that MakeDisk made on the host (the guest has no mkfs).
//   - Exporter starts fspair_exporter and scrapes it; ReadDisk picks one
//     disk's counters out of a scrape; Compute derives Features from two
//     snapshots.
//   - Expect holds the per-workload feature ranges measured in the lab
//     (FEATURES.md explains them); Classify applies the cut points.
//
// The real Filebench personalities, as the studies ran them, are
// tests/workload/filebench's: a command that runs them in lab guests on
// pairs and host settings and records these features and the live class
// per window (FEATURES.md, "The real Filebench personalities").
//
// make test checks that each workload's separating features land in their
// ranges on fresh runs in tests/validate's TestValidate (Mismatches).
// TestPersonalities (build tag measure) makes the same check on one pair
// with each workload run alone; TestMeasure (same tag) measures the full
// matrix into testdata/features.json and FEATURES.md. Both boot TCG
// guests: run them under `flock /var/tmp/fspair-lab.lock`, one guest at a
// time.
package workload
