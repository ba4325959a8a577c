// JPEG through libjpeg-turbo with the settings PIL decodes with (accurate integer IDCT, fancy
// upsampling: the library defaults), so the pixels are PIL's. libjpeg reports errors by calling
// error_exit, which here longjmps back to the one frame that called setjmp; those frames hold only
// plain data, and every C++ object lives in the caller, so nothing is skipped by the jump.
#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including them
#include <new>
#include <string>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

#include "image/decoders.h"

namespace tessera::image {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first, so libjpeg's pointer to it is a pointer to this
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are ignored as PIL ignores them, except running out of data: libjpeg would pad the
// image with gray, where PIL refuses a truncated file.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) OnError(cinfo);
}

struct JpegContext {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created = false;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Phase 1: the header, the output colour space and the first EXIF block. False on a libjpeg error.
bool ReadHeader(JpegContext* c, std::vector<uint8_t>* exif) {
  if (setjmp(c->err.jump)) return false;
  jpeg_create_decompress(&c->cinfo);
  c->created = true;
  jpeg_mem_src(&c->cinfo, c->data, static_cast<unsigned long>(c->size));
  jpeg_save_markers(&c->cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&c->cinfo, TRUE);
  switch (c->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: c->cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: c->cinfo.out_color_space = JCS_CMYK; break;
    default: c->cinfo.out_color_space = JCS_RGB;
  }
  c->cinfo.dct_method = JDCT_ISLOW;
  c->cinfo.do_fancy_upsampling = TRUE;
  for (jpeg_saved_marker_ptr m = c->cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::equal(m->data, m->data + 6, "Exif\0\0")) {
      exif->assign(m->data + 6, m->data + m->data_length);  // PIL reads the first one
      break;
    }
  }
  return true;
}

// PIL's CMYK -> RGB for JPEG's inverted (Adobe) CMYK: each channel is scaled by the ink left
// after black, with PIL's rounding of x * y / 255.
inline uint8_t InkToRgb(uint8_t ink_inverted, int not_black) {
  const int ink = 255 - ink_inverted;
  const int t = ink * not_black + 128;
  const int v = not_black - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Phase 2: the scanlines, converted to RGB into `rgb`; `row` holds one decoded scanline.
bool ReadPixels(JpegContext* c, uint8_t* rgb, uint8_t* row) {
  if (setjmp(c->err.jump)) return false;
  jpeg_start_decompress(&c->cinfo);
  const JDIMENSION w = c->cinfo.output_width;
  const int comps = c->cinfo.output_components;
  while (c->cinfo.output_scanline < c->cinfo.output_height) {
    uint8_t* dst = rgb + static_cast<size_t>(c->cinfo.output_scanline) * w * 3;
    JSAMPROW target = comps == 3 ? dst : row;
    jpeg_read_scanlines(&c->cinfo, &target, 1);
    if (comps == 1) {
      for (JDIMENSION x = 0; x < w; ++x) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
    } else if (comps == 4) {
      for (JDIMENSION x = 0; x < w; ++x) {
        const uint8_t* p = row + 4 * x;
        const int not_black = p[3];  // inverted K: 255 - black
        for (int ch = 0; ch < 3; ++ch) dst[3 * x + ch] = InkToRgb(p[ch], not_black);
      }
    }
  }
  jpeg_finish_decompress(&c->cinfo);
  return true;
}

}  // namespace

StatusOr<Image> DecodeJpeg(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options,
                           DecodedExtras* extras) {
  JpegContext c;
  c.cinfo.err = jpeg_std_error(&c.err.pub);
  c.err.pub.error_exit = OnError;
  c.err.pub.emit_message = OnMessage;
  c.err.message[0] = '\0';
  c.data = data;
  c.size = size;
  struct Destroy {
    JpegContext* c;
    ~Destroy() {
      if (c->created) jpeg_destroy_decompress(&c->cinfo);
    }
  } destroy{&c};
  auto corrupt = [&] { return InvalidArgument("image '" + name + "': corrupt or truncated JPEG: " + c.err.message); };
  if (!ReadHeader(&c, &extras->exif)) return corrupt();
  const int comps = c.cinfo.out_color_space == JCS_GRAYSCALE ? 1 : c.cinfo.out_color_space == JCS_CMYK ? 4 : 3;
  TESSERA_RETURN_IF_ERROR(CheckDeclaredSize(c.cinfo.image_width, c.cinfo.image_height, name, options));
  Image img;
  std::vector<uint8_t> row;
  try {
    img.width = c.cinfo.image_width;
    img.height = c.cinfo.image_height;
    img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
    row.resize(static_cast<size_t>(img.width * comps));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image '" + name + "': out of memory for " + std::to_string(img.width) + "x" +
                             std::to_string(img.height) + " pixels");
  }
  if (!ReadPixels(&c, img.rgb.data(), row.data())) return corrupt();
  return img;
}

}  // namespace tessera::image
