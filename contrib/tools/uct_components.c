/*
 * Which UCX runs, and which UCT components and memory domains it has, for
 * machines without ucx_info (a distribution's libucx0 alone): the release
 * (ucp_get_version), every component with its memory domains, and for
 * rc_gdr's component each md's memory types.
 *
 *   uct_components [COMPONENT]   exit 0 when COMPONENT (default: any) is
 *                                registered, 1 when not
 */

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <stdio.h>
#include <string.h>


static void print_mem_types(const char *what, uint64_t types)
{
    int t;

    printf("      %s:", what);
    for (t = 0; t < UCS_MEMORY_TYPE_LAST; ++t) {
        if (types & UCS_BIT(t)) {
            printf(" %s", ucs_memory_type_names[t]);
        }
    }
    printf("\n");
}


static void print_mds(uct_component_h component,
                      const uct_component_attr_t *attr)
{
    uct_md_resource_desc_t resources[16];
    uct_component_attr_t mds = *attr;
    uct_md_config_t *config;
    uct_md_attr_t md_attr;
    unsigned i;
    uct_md_h md;

    mds.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    mds.md_resources = resources;
    if ((attr->md_resource_count > 16) ||
        (uct_component_query(component, &mds) != UCS_OK)) {
        return;
    }

    for (i = 0; i < attr->md_resource_count; ++i) {
        printf("    md %s\n", resources[i].md_name);
        if ((uct_md_config_read(component, NULL, NULL, &config) != UCS_OK)) {
            continue;
        }
        if (uct_md_open(component, resources[i].md_name, config, &md) ==
            UCS_OK) {
            if (uct_md_query(md, &md_attr) == UCS_OK) {
                print_mem_types("registers", md_attr.cap.reg_mem_types);
                print_mem_types("detects", md_attr.cap.detect_mem_types);
            }
            uct_md_close(md);
        }
        uct_config_release(config);
    }
}


int main(int argc, char **argv)
{
    const char *wanted = (argc > 1) ? argv[1] : NULL;
    uct_component_h *components;
    uct_component_attr_t attr;
    unsigned major, minor, patch, i, count;
    int found = 0;

    ucp_get_version(&major, &minor, &patch);
    printf("UCX %u.%u.%u (%s)\n", major, minor, patch,
           ucp_get_version_string());

    if (uct_query_components(&components, &count) != UCS_OK) {
        fprintf(stderr, "uct_query_components failed\n");
        return 2;
    }

    for (i = 0; i < count; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                          UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(components[i], &attr) != UCS_OK) {
            continue;
        }
        printf("  component %s: %u memory domain(s)\n", attr.name,
               attr.md_resource_count);
        if ((wanted == NULL) || !strcmp(attr.name, wanted)) {
            found = 1;
            print_mds(components[i], &attr);
        }
    }

    uct_release_component_list(components);
    return found ? 0 : 1;
}
