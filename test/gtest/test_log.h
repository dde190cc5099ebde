/*
 * Log lines captured instead of printed, for tests that check what the code
 * says: while a log_capture lives, every message at or above its level goes
 * to captured_log (and, when it passes them on, is printed as well).
 * Inline definitions: one captured_log however many files of a binary
 * include this.
 */

#ifndef RC_GDR_TEST_LOG_H_
#define RC_GDR_TEST_LOG_H_

extern "C" {
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>
}

#include <stdarg.h>
#include <stdio.h>

#include <string>
#include <vector>


inline std::vector<std::string> captured_log;
inline bool                     captured_log_pass;
inline ucs_log_level_t          captured_log_level;


inline ucs_log_func_rc_t
capture_log(const char *file, unsigned line, const char *function,
            ucs_log_level_t level, const ucs_log_component_config_t *comp,
            const char *message, va_list ap)
{
    char buf[1024];
    va_list copy;

    if (captured_log_pass && (level > captured_log_level)) {
        return UCS_LOG_FUNC_RC_CONTINUE; /* printed, as the level says */
    }

    va_copy(copy, ap); /* the next handler reads ap again */
    vsnprintf(buf, sizeof(buf), message, copy);
    va_end(copy);
    captured_log.push_back(buf);
    return captured_log_pass ? UCS_LOG_FUNC_RC_CONTINUE :
                               UCS_LOG_FUNC_RC_STOP;
}


/* How many captured lines contain text */
inline unsigned captured_log_count(const std::string &text)
{
    unsigned count = 0;

    for (const std::string &line : captured_log) {
        count += (line.find(text) != std::string::npos);
    }
    return count;
}

inline bool captured_log_has(const std::string &text)
{
    return captured_log_count(text) > 0;
}


class log_capture {
public:
    /* pass: print each line too, as without a capture (lines more verbose
       than level are then printed as the log level says, not captured) */
    log_capture(ucs_log_level_t level = UCS_LOG_LEVEL_WARN, bool pass = false)
    {
        m_level = ucs_global_opts.log_component.log_level;
        if (!pass || (m_level < level)) {
            ucs_global_opts.log_component.log_level = level;
        }
        captured_log.clear();
        captured_log_pass  = pass;
        captured_log_level = level;
        ucs_log_push_handler(capture_log);
    }

    ~log_capture()
    {
        ucs_log_pop_handler();
        ucs_global_opts.log_component.log_level = m_level;
    }

private:
    ucs_log_level_t m_level;
};

#endif
