/*
 * rc_gdr gate: saying what the chain decided. One line for the log (the
 * failing check, its value, the knob, what to check next), a table for
 * people and JSON for machines (rc_gdr_info).
 */

#include "rc_gdr_gate.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <stdio.h>
#include <string.h>


/* Keys of the directions in JSON */
static const char *uct_rc_gdr_gate_dir_keys[] = {
    [UCT_RC_GDR_DIR_NIC_READS_GPU]  = "nic_reads_gpu",
    [UCT_RC_GDR_DIR_NIC_WRITES_GPU] = "nic_writes_gpu"
};

static unsigned
uct_rc_gdr_gate_num_warnings(const uct_rc_gdr_gate_result_t *result)
{
    unsigned i, count = 0;

    for (i = 0; i < result->num_evidence; ++i) {
        count += (result->evidence[i].verdict == UCT_RC_GDR_VERDICT_WARN);
    }

    return count;
}

static const char *
uct_rc_gdr_gate_format_line(const uct_rc_gdr_gate_result_t *result,
                            uct_rc_gdr_dir_t dir, const char *dir_label,
                            char *buf, size_t max)
{
    uct_rc_gdr_lane_t lane = result->lane[dir];
    const uct_rc_gdr_evidence_t *ev;
    unsigned warnings;
    char outcome[96];

    if (result->why[dir] < 0) {
        warnings = uct_rc_gdr_gate_num_warnings(result);
        snprintf(buf, max, "rc_gdr: %s <-> %s %s uses the GDR lane (%s)%s",
                 result->gpu, result->nic, dir_label,
                 (lane == UCT_RC_GDR_LANE_GDR_DMABUF) ? "DMA-BUF" : "peermem",
                 (warnings > 0) ? ", with warnings in the evidence" : "");
        return buf;
    }

    if (lane == UCT_RC_GDR_LANE_BOUNCE) {
        snprintf(outcome, sizeof(outcome), "uses the bounce lane");
    } else {
        snprintf(outcome, sizeof(outcome), "is refused (%s)",
                 result->refused_by[dir]);
    }

    ev = &result->evidence[result->why[dir]];
    snprintf(buf, max, "rc_gdr: %s <-> %s %s %s: %s = %s%s%s%s%s", result->gpu,
             result->nic, dir_label, outcome, ev->check, ev->value,
             ((ev->hint != NULL) || (ev->knob != NULL)) ? "; HINT: " : "",
             (ev->hint != NULL) ? ev->hint : "",
             ((ev->hint != NULL) && (ev->knob != NULL)) ? ", " : "",
             (ev->knob != NULL) ? ev->knob : "");
    return buf;
}

const char *uct_rc_gdr_gate_format_why(const uct_rc_gdr_gate_result_t *result,
                                       uct_rc_gdr_dir_t dir, char *buf,
                                       size_t max)
{
    return uct_rc_gdr_gate_format_line(result, dir,
                                       uct_rc_gdr_gate_dir_name(dir), buf,
                                       max);
}

void uct_rc_gdr_gate_log(const uct_rc_gdr_gate_result_t *result)
{
    char buf[UCT_RC_GDR_GATE_WHY_MAX];
    ucs_log_level_t level;
    uct_rc_gdr_dir_t dir;
    int same;

    same = (result->lane[0] == result->lane[1]) &&
           (result->why[0] == result->why[1]) &&
           !strcmp(result->refused_by[0], result->refused_by[1]);

    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        if (same) {
            uct_rc_gdr_gate_format_line(result, dir, "both directions", buf,
                                        sizeof(buf));
        } else {
            uct_rc_gdr_gate_format_why(result, dir, buf, sizeof(buf));
        }

        if (result->why[dir] < 0) {
            level = UCS_LOG_LEVEL_DEBUG;
        } else if ((result->status != UCS_OK) && result->refused_by[dir][0] &&
                   strncmp(result->refused_by[dir], UCT_RC_GDR_KNOB_BOUNCE,
                           strlen(UCT_RC_GDR_KNOB_BOUNCE))) {
            level = UCS_LOG_LEVEL_ERROR;
        } else {
            level = UCS_LOG_LEVEL_DIAG;
        }

        ucs_log(level, "%s", buf);
        if (same) {
            break;
        }
    }
}

void uct_rc_gdr_gate_print_table(const uct_rc_gdr_gate_result_t *result,
                                 FILE *stream)
{
    char buf[UCT_RC_GDR_GATE_WHY_MAX];
    const uct_rc_gdr_evidence_t *ev;
    uct_rc_gdr_dir_t dir;
    unsigned i;

    fprintf(stream, "%s%s%s%s <-> %s port %u: distance %s\n", result->gpu,
            result->gpu_bdf[0] ? " (" : "", result->gpu_bdf,
            result->gpu_bdf[0] ? ")" : "", result->nic, result->port_num,
            uct_rc_gdr_topo_dist_name(result->dist));
    fprintf(stream, "  %-26s %-7s %s\n", "check", "verdict", "value");
    for (i = 0; i < result->num_evidence; ++i) {
        ev = &result->evidence[i];
        fprintf(stream, "  %-26s %-7s %s\n", ev->check,
                uct_rc_gdr_gate_verdict_name(ev->verdict), ev->value);
        fprintf(stream, "  %-34s from %s\n", "", ev->source);
        if ((ev->hint != NULL) && ((ev->verdict == UCT_RC_GDR_VERDICT_FAIL) ||
                                   (ev->verdict == UCT_RC_GDR_VERDICT_WARN))) {
            fprintf(stream, "  %-34s hint: %s%s%s\n", "", ev->hint,
                    (ev->knob != NULL) ? ", " : "",
                    (ev->knob != NULL) ? ev->knob : "");
        }
    }

    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        fprintf(stream, "  %-15s %s\n", uct_rc_gdr_gate_dir_name(dir),
                uct_rc_gdr_gate_lane_name(result->lane[dir]));
        fprintf(stream, "    %s\n",
                uct_rc_gdr_gate_format_why(result, dir, buf, sizeof(buf)));
    }
}

void uct_rc_gdr_gate_print_json_string(FILE *stream, const char *str)
{
    const unsigned char *p;

    if (str == NULL) {
        fputs("null", stream);
        return;
    }

    fputc('"', stream);
    for (p = (const unsigned char*)str; *p != '\0'; ++p) {
        if ((*p == '"') || (*p == '\\')) {
            fprintf(stream, "\\%c", *p);
        } else if (*p == '\n') {
            fputs("\\n", stream);
        } else if (*p == '\t') {
            fputs("\\t", stream);
        } else if ((*p < 0x20) || (*p >= 0x7f)) {
            /* Bytes of unknown encoding still give valid JSON this way */
            fprintf(stream, "\\u%04x", *p);
        } else {
            fputc(*p, stream);
        }
    }
    fputc('"', stream);
}

static void uct_rc_gdr_gate_print_json_field(FILE *stream, const char *key,
                                             const char *value, int last)
{
    uct_rc_gdr_gate_print_json_string(stream, key);
    fputs(": ", stream);
    uct_rc_gdr_gate_print_json_string(stream, value);
    fputs(last ? "" : ", ", stream);
}

void uct_rc_gdr_gate_print_json(const uct_rc_gdr_gate_result_t *result,
                                FILE *stream)
{
    char buf[UCT_RC_GDR_GATE_WHY_MAX];
    const uct_rc_gdr_evidence_t *ev;
    uct_rc_gdr_dir_t dir;
    unsigned i;

    fputs("{", stream);
    uct_rc_gdr_gate_print_json_field(stream, "gpu", result->gpu, 0);
    uct_rc_gdr_gate_print_json_field(stream, "gpu_bdf", result->gpu_bdf, 0);
    uct_rc_gdr_gate_print_json_field(stream, "nic", result->nic, 0);
    fprintf(stream, "\"port\": %u, ", result->port_num);
    uct_rc_gdr_gate_print_json_field(stream, "status",
                                     ucs_status_string(result->status), 0);
    uct_rc_gdr_gate_print_json_field(stream, "distance",
                                     uct_rc_gdr_topo_dist_name(result->dist),
                                     0);

    fputs("\"lanes\": {", stream);
    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        uct_rc_gdr_gate_print_json_field(
                stream, uct_rc_gdr_gate_dir_keys[dir],
                uct_rc_gdr_gate_lane_name(result->lane[dir]),
                dir == UCT_RC_GDR_DIR_LAST - 1);
    }

    fputs("}, \"why\": {", stream);
    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        uct_rc_gdr_gate_print_json_field(
                stream, uct_rc_gdr_gate_dir_keys[dir],
                uct_rc_gdr_gate_format_why(result, dir, buf, sizeof(buf)),
                dir == UCT_RC_GDR_DIR_LAST - 1);
    }

    fputs("}, \"evidence\": [", stream);
    for (i = 0; i < result->num_evidence; ++i) {
        ev = &result->evidence[i];
        fputs((i > 0) ? ", {" : "{", stream);
        uct_rc_gdr_gate_print_json_field(stream, "check", ev->check, 0);
        uct_rc_gdr_gate_print_json_field(stream, "value", ev->value, 0);
        uct_rc_gdr_gate_print_json_field(
                stream, "verdict", uct_rc_gdr_gate_verdict_name(ev->verdict),
                0);
        uct_rc_gdr_gate_print_json_field(stream, "source", ev->source, 0);
        uct_rc_gdr_gate_print_json_field(stream, "knob", ev->knob, 0);
        uct_rc_gdr_gate_print_json_field(stream, "hint", ev->hint, 1);
        fputs("}", stream);
    }
    fputs("]}", stream);
}


/* Short names of the lanes in the matrix's cells */
static const char *uct_rc_gdr_gate_cell_lane_name(uct_rc_gdr_lane_t lane)
{
    switch (lane) {
    case UCT_RC_GDR_LANE_GDR_DMABUF:
        return "dmabuf";
    case UCT_RC_GDR_LANE_GDR_PEERMEM:
        return "peermem";
    case UCT_RC_GDR_LANE_BOUNCE:
        return "bounce";
    case UCT_RC_GDR_LANE_REFUSED:
        return "none";
    default:
        return "?";
    }
}

void uct_rc_gdr_gate_cell_set(uct_rc_gdr_gate_cell_t *cell,
                              const uct_rc_gdr_gate_result_t *result)
{
    uct_rc_gdr_dir_t dir;

    cell->dist = (result != NULL) ? result->dist : UCT_RC_GDR_DIST_UNKNOWN;
    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        cell->lane[dir] = (result != NULL) ? result->lane[dir] :
                                             UCT_RC_GDR_LANE_LAST;
    }
}

/* The smallest known distance of a GPU's row, UNKNOWN if none is known */
static uct_rc_gdr_dist_t
uct_rc_gdr_gate_row_nearest(const uct_rc_gdr_gate_cell_t *row,
                            unsigned num_nics)
{
    uct_rc_gdr_dist_t nearest = UCT_RC_GDR_DIST_UNKNOWN;
    unsigned n;

    for (n = 0; n < num_nics; ++n) {
        if (row[n].dist < nearest) {
            nearest = row[n].dist;
        }
    }
    return nearest;
}

/* Whether a cell of a row is marked nearest ('*', "nearest": true, listed
 * by --nearest-nics): at the row's smallest distance, when one is known */
static int uct_rc_gdr_gate_is_nearest(const uct_rc_gdr_gate_cell_t *cell,
                                      uct_rc_gdr_dist_t nearest)
{
    return (cell->dist == nearest) && (nearest != UCT_RC_GDR_DIST_UNKNOWN);
}

/* "PIX* dmabuf/bounce": distance, nearest mark, reads/writes lanes */
static void uct_rc_gdr_gate_cell_str(const uct_rc_gdr_gate_cell_t *cell,
                                     uct_rc_gdr_dist_t nearest, char *buf,
                                     size_t max)
{
    snprintf(buf, max, "%s%s %s/%s", uct_rc_gdr_topo_dist_name(cell->dist),
             uct_rc_gdr_gate_is_nearest(cell, nearest) ? "*" : "",
             uct_rc_gdr_gate_cell_lane_name(
                     cell->lane[UCT_RC_GDR_DIR_NIC_READS_GPU]),
             uct_rc_gdr_gate_cell_lane_name(
                     cell->lane[UCT_RC_GDR_DIR_NIC_WRITES_GPU]));
}

void uct_rc_gdr_gate_print_matrix(const char *const *gpus, unsigned num_gpus,
                                  const char *const *nics, unsigned num_nics,
                                  const uct_rc_gdr_gate_cell_t *cells,
                                  FILE *stream)
{
    const uct_rc_gdr_gate_cell_t *row;
    uct_rc_gdr_dist_t nearest;
    int width, name_width = 8;
    char cell[64];
    unsigned g, n;

    /* One width for every column, as wide as the widest cell or name */
    width = 0;
    for (g = 0; g < num_gpus; ++g) {
        row     = &cells[g * num_nics];
        nearest = uct_rc_gdr_gate_row_nearest(row, num_nics);
        for (n = 0; n < num_nics; ++n) {
            uct_rc_gdr_gate_cell_str(&row[n], nearest, cell, sizeof(cell));
            if ((int)strlen(cell) > width) {
                width = strlen(cell);
            }
        }
    }
    for (n = 0; n < num_nics; ++n) {
        if ((int)strlen(nics[n]) > width) {
            width = strlen(nics[n]);
        }
    }
    for (g = 0; g < num_gpus; ++g) {
        if ((int)strlen(gpus[g]) > name_width) {
            name_width = strlen(gpus[g]);
        }
    }

    fprintf(stream, "%-*s", name_width, "");
    for (n = 0; n < num_nics; ++n) {
        /* the last column unpadded: no trailing blanks */
        fprintf(stream, "  %-*s", (n + 1 < num_nics) ? width : 0, nics[n]);
    }
    fputs("\n", stream);

    for (g = 0; g < num_gpus; ++g) {
        row     = &cells[g * num_nics];
        nearest = uct_rc_gdr_gate_row_nearest(row, num_nics);
        fprintf(stream, "%-*s", name_width, gpus[g]);
        for (n = 0; n < num_nics; ++n) {
            uct_rc_gdr_gate_cell_str(&row[n], nearest, cell, sizeof(cell));
            fprintf(stream, "  %-*s", (n + 1 < num_nics) ? width : 0,
                    cell);
        }
        fputs("\n", stream);
    }

    fputs("\nLegend (distance GPU<->NIC, then the lane of sending from the "
          "GPU / receiving into it):\n"
          "  LOC      = the same PCI device\n"
          "  PIX      = at most one PCIe bridge (one switch) between them\n"
          "  PXB      = several PCIe bridges, not the host bridge\n"
          "  PHB      = through a PCIe host bridge (the CPU root complex)\n"
          "  NODE     = between host bridges of one NUMA node\n"
          "  SYS      = across NUMA nodes (QPI/UPI, xGMI)\n"
          "  UNKNOWN  = not on PCI or not in sysfs (rxe, siw)\n"
          "  *        = a NIC nearest the GPU: UCP's distance ranking puts "
          "its traffic there\n"
          "  dmabuf, peermem = GPUDirect RDMA by that mechanism; bounce = "
          "pinned host staging; none = refused\n", stream);
}

unsigned uct_rc_gdr_gate_print_nearest(const char *const *nics,
                                       unsigned num_nics,
                                       const uct_rc_gdr_gate_cell_t *row,
                                       FILE *stream)
{
    uct_rc_gdr_dist_t nearest = uct_rc_gdr_gate_row_nearest(row, num_nics);
    unsigned n, count = 0;

    for (n = 0; n < num_nics; ++n) {
        if (uct_rc_gdr_gate_is_nearest(&row[n], nearest)) {
            fprintf(stream, "%s%s", (count > 0) ? "," : "", nics[n]);
            ++count;
        }
    }
    if (count > 0) {
        fputs("\n", stream);
    }
    return count;
}

void uct_rc_gdr_gate_print_matrix_json(const char *const *gpus,
                                       unsigned num_gpus,
                                       const char *const *nics,
                                       unsigned num_nics,
                                       const uct_rc_gdr_gate_cell_t *cells,
                                       FILE *stream)
{
    const uct_rc_gdr_gate_cell_t *row;
    uct_rc_gdr_dist_t nearest;
    uct_rc_gdr_dir_t dir;
    unsigned g, n;

    fputs("{\"gpus\": [", stream);
    for (g = 0; g < num_gpus; ++g) {
        fputs((g > 0) ? ", " : "", stream);
        uct_rc_gdr_gate_print_json_string(stream, gpus[g]);
    }
    fputs("], \"nics\": [", stream);
    for (n = 0; n < num_nics; ++n) {
        fputs((n > 0) ? ", " : "", stream);
        uct_rc_gdr_gate_print_json_string(stream, nics[n]);
    }
    fputs("], \"cells\": [", stream);
    for (g = 0; g < num_gpus; ++g) {
        row     = &cells[g * num_nics];
        nearest = uct_rc_gdr_gate_row_nearest(row, num_nics);
        fputs((g > 0) ? ", [" : "[", stream);
        for (n = 0; n < num_nics; ++n) {
            fprintf(stream, "%s{\"distance\": \"%s\", \"nearest\": %s",
                    (n > 0) ? ", " : "",
                    uct_rc_gdr_topo_dist_name(row[n].dist),
                    uct_rc_gdr_gate_is_nearest(&row[n], nearest) ?
                    "true" : "false");
            for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
                fprintf(stream, ", \"%s\": \"%s\"",
                        uct_rc_gdr_gate_dir_keys[dir],
                        (row[n].lane[dir] < UCT_RC_GDR_LANE_LAST) ?
                        uct_rc_gdr_gate_lane_name(row[n].lane[dir]) :
                        "not evaluated");
            }
            fputs("}", stream);
        }
        fputs("]", stream);
    }
    fputs("]}", stream);
}
