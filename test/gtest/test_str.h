/*
 * printf into a string, for the descriptions of checks in every gtest
 * binary of the project.
 *
 * See file LICENSE for terms.
 */

#ifndef RC_GDR_TEST_STR_H_
#define RC_GDR_TEST_STR_H_

#include <ucs/sys/compiler_def.h>

#include <stdarg.h>
#include <stdio.h>

#include <string>


inline std::string uct_test_str(const char *fmt, ...) UCS_F_PRINTF(1, 2);

inline std::string uct_test_str(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

#endif
