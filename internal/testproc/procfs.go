package testproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat is what the harness needs from /proc/PID/stat.
type Stat struct {
	PID, PPID, Pgrp int
	State           byte   // R, S, D, Z, …
	Start           uint64 // start time in clock ticks since boot: tells a reused PID apart
	Comm            string
}

// alive tells whether the process still runs: zombies and dead tasks have finished.
func (s Stat) Alive() bool { return s.State != 'Z' && s.State != 'X' && s.State != 'x' }

// readStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return parseStat(data)
}

// parseStat parses the text of /proc/PID/stat. comm is in parentheses and may itself hold spaces
// and parentheses, so the fields after it are found from the last ')'.
func parseStat(data []byte) (Stat, error) {
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("parse /proc stat %q: no (comm)", data)
	}
	var s Stat
	var err error
	if s.PID, err = strconv.Atoi(string(bytes.TrimSpace(data[:open]))); err != nil {
		return Stat{}, fmt.Errorf("parse /proc stat pid: %w", err)
	}
	s.Comm = string(data[open+1 : end])
	// Fields from 3 (state) on; starttime is field 22.
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse /proc stat of %d: %d fields", s.PID, len(f))
	}
	s.State = f[0][0]
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("parse /proc stat ppid: %w", err)
	}
	if s.Pgrp, err = strconv.Atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("parse /proc stat pgrp: %w", err)
	}
	if s.Start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse /proc stat starttime: %w", err)
	}
	return s, nil
}

// allProcs reads the stat of every process. Processes that exit during the scan are skipped.
func AllProcs() ([]Stat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []Stat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// cmdline returns the command line of pid for messages, or its comm when unreadable.
func Cmdline(s Stat) string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID), "cmdline"))
	if err != nil || len(data) == 0 {
		return s.Comm
	}
	line := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
