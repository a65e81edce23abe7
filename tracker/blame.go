package tracker

// Suspect is what the fault rule weighs of a storage a fault may be blamed on (a null address matched by
// size, or an address several storages held in turn): the agent's live storages and doctor's traced
// handles both come down to it, so that both name the same storage.
type Suspect struct {
	Released bool // still released when the fault came: nothing brought its memory back
	External bool // some region's input (owned outside the groups that saved it): releasing it was the bug
	Order    int  // release order: the earliest release destroyed what the later ones only reused
}

// MoreLikely reports whether a is to be blamed before b: a storage still released before one restored,
// an external one before an internal one, then the earliest release.
func MoreLikely(a, b Suspect) bool {
	if a.Released != b.Released {
		return a.Released
	}
	if a.External != b.External {
		return a.External
	}
	return a.Order < b.Order
}
