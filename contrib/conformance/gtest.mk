# Builds UCX's UCT googletest suites against the UCX installed on this
# machine, so that they test the very libraries rc_gdr is preloaded into
# (and libuct_ib is loaded once, by libuct, as in any UCX program).
#
# Used by contrib/conformance/build-gtest.sh, which prepares the directories:
#
#   make -f gtest.mk -C OUT GTEST_DIR=<patched test/gtest copy> \
#        UCX_SRC=<ucx source tree> UCX_CONFIG=<dir of config.h> \
#        [UCX_PREFIX=<install prefix> UCX_API=1.22] -j$(nproc)
#
# UCX_PREFIX: an upstream release installed by contrib/ucx-upstream.sh (its
# public headers and libraries, found at run time through the binary's
# rpath); empty for the distribution's UCX. UCX_API: the release's suite
# list, 1.13 (Debian's 1.13.1) or 1.22.
#
# Sources are UCX's own, unmodified except for the transport lists patched by
# contrib/conformance/*.patch. Left out, and why:
#   common/test_perf.cc, uct/test_uct_perf.cc  need libucxperf (not installed)
#   common/test_obj_size.cc   sizes of rc/dc/ud internals, not a transport test
#   uct/test_tag.cc           tag offload: rc_mlx5 and dc_mlx5 only
#   uct/test_mm.cc, uct/tcp/  posix/sysv/xpmem and tcp only
#   uct/ib/, ucp/, ucs/, ucm/ whitebox tests of other layers

GTEST_DIR  ?= src/test/gtest
UCX_SRC    ?= /usr/src/ucx
UCX_CONFIG ?= .
UCX_PREFIX ?=
UCX_API    ?= 1.13

COMMON_SRCS = \
	common/main.cc \
	common/test.cc \
	common/test_helpers.cc \
	common/mem_buffer.cc \
	common/test_gtest_cmn.cc \
	common/test_watchdog.cc

UCT_SRCS = \
	uct/uct_test.cc \
	uct/uct_p2p_test.cc \
	uct/test_amo.cc \
	uct/test_amo_add_xor.cc \
	uct/test_amo_and_or.cc \
	uct/test_amo_cswap.cc \
	uct/test_amo_fadd_fxor.cc \
	uct/test_amo_fand_for.cc \
	uct/test_amo_swap.cc \
	uct/test_event.cc \
	uct/test_fence.cc \
	uct/test_flush.cc \
	uct/test_many2one_am.cc \
	uct/test_md.cc \
	uct/test_mem.cc \
	uct/test_p2p_am.cc \
	uct/test_p2p_err.cc \
	uct/test_p2p_mix.cc \
	uct/test_p2p_rma.cc \
	uct/test_peer_failure.cc \
	uct/test_pending.cc \
	uct/test_progress.cc \
	uct/test_stats.cc \
	uct/test_uct_ep.cc \
	uct/test_zcopy_comp.cc \
	uct/v2/test_uct_query.cc

# Suites 1.22 adds that apply to a verbs transport
ifeq ($(UCX_API),1.22)
UCT_SRCS += \
	uct/test_atomic_key_reg_rdma_mem_type.cc \
	uct/test_uct_iface.cc
endif

GTEST_LIB_SRCS = \
	common/googletest/gtest.cc \
	common/googletest/gtest-death-test.cc \
	common/googletest/gtest-filepath.cc \
	common/googletest/gtest-port.cc \
	common/googletest/gtest-printers.cc \
	common/googletest/gtest-test-part.cc \
	common/googletest/gtest-typed-test.cc
ifeq ($(UCX_API),1.22)
GTEST_LIB_SRCS += common/googletest/gtest-matchers.cc
endif

SRCS = $(COMMON_SRCS) $(UCT_SRCS) $(GTEST_LIB_SRCS)
OBJS = $(patsubst %.cc,obj/%.o,$(SRCS))

# As UCX's own test/gtest/Makefile.am, without -Werror (another compiler may
# warn where UCX's did not). Internal headers come from the source tree,
# config.h is the installed binary's (`ucx_info -b`), the public version
# headers are the installed ones (/usr/include). -rdynamic: UCX's backtraces
# of a crash or a hang name the test's functions.
CPPFLAGS = -DHAVE_CONFIG_H -DTOP_SRCDIR=\"$(UCX_SRC)\" \
	-I$(UCX_CONFIG) -I$(UCX_SRC)/src -I$(GTEST_DIR)/.. -I$(GTEST_DIR) \
	-DGTEST_UCM_HOOK_LIB_DIR=\"/nonexistent\"
CXXFLAGS = -std=c++11 -g -O0 -Wall -Wno-deprecated-declarations -pthread
LDFLAGS  = -pthread -rdynamic
LIBS     = -lucp -luct -lucs -lucm -ldl -lm
ifneq ($(UCX_PREFIX),)
CPPFLAGS += -I$(UCX_PREFIX)/include
LDFLAGS  += -L$(UCX_PREFIX)/lib -Wl,-rpath,$(UCX_PREFIX)/lib \
	    -Wl,--disable-new-dtags
endif

gtest: $(OBJS)
	$(CXX) $(LDFLAGS) -o $@.tmp $(OBJS) $(LIBS)
	mv $@.tmp $@

obj/%.o: $(GTEST_DIR)/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MMD -MP -c -o $@ $<

-include $(OBJS:.o=.d)

.PHONY: clean
clean:
	rm -rf obj gtest gtest.tmp
