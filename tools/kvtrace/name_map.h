/* SPDX-License-Identifier: MIT */
/* A map from names (trace sequence IDs) to pointers: open addressing, grows at 1/2 load. */
#ifndef KVPOOL_NAME_MAP_H
#define KVPOOL_NAME_MAP_H

#include <stddef.h>

struct name_map_slot {
	char *name;
	void *value;
};

struct name_map {
	struct name_map_slot *slots;
	size_t cap, len;
};

void *name_map_get(const struct name_map *m, const char *name);
/* Copies @name; 0, or -ENOMEM. The name must not be in the map yet. */
int name_map_put(struct name_map *m, const char *name, void *value);
/* Calls @fn on every value, then frees the map's memory. */
void name_map_release(struct name_map *m, void (*fn)(void *value));

#endif
