package discovery

import "github.com/reconscope/reconscope/pkg/discovery/cgroup"

// Container is what a process's cgroup file says about the container it runs in (package
// cgroup: runtime, container ID, pod UID).
type Container = cgroup.Container
