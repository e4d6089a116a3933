/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "name_map.h"

static size_t slot_of(const struct name_map *m, const char *name)
{
	size_t i = (size_t)XXH3_64bits(name, strlen(name)) & (m->cap - 1);

	while (m->slots[i].name && strcmp(m->slots[i].name, name))
		i = (i + 1) & (m->cap - 1);
	return i;
}

void *name_map_get(const struct name_map *m, const char *name)
{
	return m->cap ? m->slots[slot_of(m, name)].value : NULL;
}

static int grow(struct name_map *m)
{
	struct name_map old = *m;

	m->cap = old.cap ? old.cap * 2 : 64;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	if (!m->slots) {
		*m = old;
		return -ENOMEM;
	}
	for (size_t i = 0; i < old.cap; i++)
		if (old.slots[i].name)
			m->slots[slot_of(m, old.slots[i].name)] = old.slots[i];
	free(old.slots);
	return 0;
}

int name_map_put(struct name_map *m, const char *name, void *value)
{
	char *copy;
	size_t i;

	if ((m->len + 1) * 2 > m->cap && grow(m))
		return -ENOMEM;
	copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	i = slot_of(m, name);
	m->slots[i] = (struct name_map_slot){ copy, value };
	m->len++;
	return 0;
}

void name_map_release(struct name_map *m, void (*fn)(void *value))
{
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].name)
			continue;
		if (fn)
			fn(m->slots[i].value);
		free(m->slots[i].name);
	}
	free(m->slots);
	*m = (struct name_map){ 0 };
}
