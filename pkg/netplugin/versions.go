package netplugin

// VersionsFile is the file in a network's state dir (its containers'
// /var/lib/cni) where kurma's cni-wrapper keeps what each plugin of the
// image answered VERSION with at setup, so that a later start of the same
// plugin files, whatever its config, asks none of them again. kurmad keeps
// it in memory by image ID and writes it into the state dir of a network of
// the same image that has none before its container starts: each image's
// plugins are asked once per kurmad (and once per network across restarts).
const VersionsFile = "kurma-plugin-versions"

// MaxVersionsFile bounds what kurmad reads of a VersionsFile.
const MaxVersionsFile = 64 << 10

// PluginVersions is a VersionsFile: by plugin path in the container, the
// file it was and the CNI versions it supports.
type PluginVersions map[string]PluginVersion

// PluginVersion is what one plugin file answered VERSION with. File says
// which file that was (size, mtime, inode): another file at the same path
// is asked again.
type PluginVersion struct {
	File     string   `json:"file"`
	Versions []string `json:"versions"`
}
