package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStat is what the harness needs from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgrp int
	state           byte   // R, S, D, Z, …
	start           uint64 // start time in clock ticks since boot: tells a reused PID apart
	comm            string
}

// alive tells whether the process still runs: zombies and dead tasks have finished.
func (s procStat) alive() bool { return s.state != 'Z' && s.state != 'X' && s.state != 'x' }

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(data)
}

// parseStat parses the text of /proc/PID/stat. comm is in parentheses and may itself hold spaces
// and parentheses, so the fields after it are found from the last ')'.
func parseStat(data []byte) (procStat, error) {
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("parse /proc stat %q: no (comm)", data)
	}
	var s procStat
	var err error
	if s.pid, err = strconv.Atoi(string(bytes.TrimSpace(data[:open]))); err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat pid: %w", err)
	}
	s.comm = string(data[open+1 : end])
	// Fields from 3 (state) on; starttime is field 22.
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse /proc stat of %d: %d fields", s.pid, len(f))
	}
	s.state = f[0][0]
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat ppid: %w", err)
	}
	if s.pgrp, err = strconv.Atoi(f[2]); err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat pgrp: %w", err)
	}
	if s.start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("parse /proc stat starttime: %w", err)
	}
	return s, nil
}

// allProcs reads the stat of every process. Processes that exit during the scan are skipped.
func allProcs() ([]procStat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := readStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// cmdline returns the command line of pid for messages, or its comm when unreadable.
func cmdline(s procStat) string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.pid), "cmdline"))
	if err != nil || len(data) == 0 {
		return s.comm
	}
	line := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
