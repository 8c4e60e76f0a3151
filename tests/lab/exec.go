package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// run runs a host tool and returns its standard output. The error names the
// command and carries its standard error, which is where mkfs, losetup and
// mount explain themselves. A missing tool is reported with the package
// list to install.
func run(ctx context.Context, name string, args ...string) (string, error) {
	if _, err := exec.LookPath(name); err != nil {
		return "", fmt.Errorf("%s not found (install the packages in tests/lab/packages.txt): %w", name, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}
