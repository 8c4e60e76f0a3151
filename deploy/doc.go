// Package deploy holds fspair's deployment files and no code: compose.yaml
// at the repository root with the images it builds (deploy/docker,
// deploy/libvirt-exporter), the configuration both stacks share
// (deploy/prometheus, deploy/alertmanager, deploy/grafana), the systemd
// unit (deploy/systemd) and the native stack (scripts/stack.sh).
//
// Its tests check them: compose.yaml loads with compose-go and with
// docker-compose, pins every image, gives every service a healthcheck and
// fspair-exporter exactly the capabilities the exporter checks for at start
// (exporter/privilege), and mounts only files that exist and pass their own
// checkers (promtool, amtool); the exporter built as the image builds it
// starts with those capabilities alone; and the native stack starts, serves
// the rules and fspair's target, and stops leaving no process. They need
// root and the Debian packages of scripts/install-deps.sh, and fail, never
// skip, when something is missing.
package deploy
