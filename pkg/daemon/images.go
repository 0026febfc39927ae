package daemon

import (
	"slices"
)

// imageUsers returns the networks, sorted, with a generation that runs
// from imageID (or will: a retiring generation waiting to restart): such
// an image cannot be removed, its containers and every later del of their
// pods need its rootfs.
func (d *Daemon) imageUsers(imageID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var users []string
	for k, g := range d.gens {
		if g.image != nil && g.image.ID == imageID && !slices.Contains(users, k.Network) {
			users = append(users, k.Network)
		}
	}
	slices.Sort(users)
	return users
}
